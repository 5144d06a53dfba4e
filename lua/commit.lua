-- commit.lua: record an article and its verdict, but only if nothing the worker
-- read in gather.lua has changed since (optimistic concurrency). Redis does O(1)
-- work per key read: no set is scanned here.
--
-- Why the checks are enough: block sets and signature fields only ever grow
-- (a delete leaves its handle behind as a tombstone, skipped on read), so an
-- unchanged size means unchanged contents; and a bucket whose handle counter
-- has not moved received no insert at all, so its keys need no check.
--
-- KEYS[1]  the bucket registry (ZSET label -> bucket start ms)
-- ARGV[1]  key prefix, ARGV[2] article id
-- ARGV[3], ARGV[4] bucket start range probed by gather.lua (ms)
-- ARGV[5]  the article's bucket label, ARGV[6] its bucket start (ms)
-- ARGV[7]  retention after a bucket starts (bucket length + window, ms)
-- ARGV[8]  SimHash, 16 hex     ARGV[9] packed fingerprint   ARGV[10] meta
-- ARGV[11..14] the four blocks (4 hex)   ARGV[15] content hash (16 hex, "" = empty
--          fingerprint: not indexed)     ARGV[16] number of sentences S
-- ARGV[17 .. 16+S] sentence hashes (16 hex)
-- then     root id of the cluster to link to ("" when unique)
-- then     number of buckets B read, and B times:
--          label, counter, 4 block set sizes, content value length, S sentence value lengths
--
-- Returns {"ok", handle} | {"retry", reason} | {"replay"} | {"expired"}
local P, id = ARGV[1], ARGV[2]
local reg = KEYS[1]
local label, start, retain = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
local content, S = ARGV[15], tonumber(ARGV[16])
local i = 17 + S
local root = ARGV[i]
local B = tonumber(ARGV[i + 1])
i = i + 2

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Idempotency: an id stored in any live bucket is never stored twice.
local live = redis.call('ZRANGE', reg, 0, -1)
for _, l in ipairs(live) do
  if redis.call('HEXISTS', P .. 'i:' .. l, id) == 1 then return {'replay'} end
end

-- Validation: the same buckets exist in the probed range, and none of what was
-- read has grown.
if content ~= '' then
  local labels = redis.call('ZRANGEBYSCORE', reg, ARGV[3], ARGV[4])
  if #labels ~= B then return {'retry', 'buckets'} end
  for b = 1, B do
    local l = ARGV[i]
    if labels[b] ~= l then return {'retry', 'buckets'} end
    local counter = redis.call('GET', P .. 'n:' .. l) or ''
    if counter ~= ARGV[i + 1] then
      for pos = 0, 3 do
        if redis.call('SCARD', P .. 'b:' .. l .. ':' .. pos .. ':' .. ARGV[11 + pos]) ~= tonumber(ARGV[i + 2 + pos]) then
          return {'retry', 'block'}
        end
      end
      if redis.call('HSTRLEN', P .. 'c:' .. l .. ':' .. string.sub(content, 1, 3), string.sub(content, 4)) ~= tonumber(ARGV[i + 6]) then
        return {'retry', 'content'}
      end
      for k = 1, S do
        local s = ARGV[16 + k]
        if redis.call('HSTRLEN', P .. 's:' .. l .. ':' .. string.sub(s, 1, 4), string.sub(s, 5)) ~= tonumber(ARGV[i + 6 + k]) then
          return {'retry', 'sentence'}
        end
      end
    end
    i = i + 7 + S
  end
end

-- Past its retention already (an old article): decide, but store nothing.
if start + retain <= now_ms then return {'expired'} end
local expire_at = math.ceil((start + retain) / 1000)

local function touch(key)
  redis.call('EXPIREAT', key, expire_at)
end
-- Append a handle to a space-separated list in a hash field (append-only, so the
-- field's length is its version).
local function append(key, field, token)
  local v = redis.call('HGET', key, field)
  redis.call('HSET', key, field, v and (v .. ' ' .. token) or token)
  touch(key)
end

local nkey = P .. 'n:' .. label
local h = redis.call('INCR', nkey)
touch(nkey)
if h == 1 then
  -- A new bucket: register it and forget buckets whose keys have expired.
  redis.call('ZADD', reg, start, label)
  redis.call('ZREMRANGEBYSCORE', reg, '-inf', '(' .. (now_ms - retain))
  if redis.call('TTL', reg) < 0 then
    redis.call('EXPIREAT', reg, expire_at)
  else
    redis.call('EXPIREAT', reg, expire_at, 'GT')
  end
end
local chunk = math.floor(h / 100)
local ikey = P .. 'i:' .. label
redis.call('HSET', ikey, id, ARGV[8] .. ':' .. h)
touch(ikey)
local fkey = P .. 'f:' .. label .. ':' .. chunk
redis.call('HSET', fkey, h, ARGV[9])
touch(fkey)
local mkey = P .. 'm:' .. label .. ':' .. chunk
redis.call('HSET', mkey, h, ARGV[10])
touch(mkey)

if content ~= '' then
  for pos = 0, 3 do
    local bkey = P .. 'b:' .. label .. ':' .. pos .. ':' .. ARGV[11 + pos]
    redis.call('SADD', bkey, h)
    touch(bkey)
  end
  append(P .. 'c:' .. label .. ':' .. string.sub(content, 1, 3), string.sub(content, 4), h)
  for k = 1, S do
    local s = ARGV[16 + k]
    append(P .. 's:' .. label .. ':' .. string.sub(s, 1, 4), string.sub(s, 5), h)
  end
end

-- Link a duplicate to its cluster's root (in the root's bucket, expiring with it).
if root ~= '' then
  for _, l in ipairs(live) do
    local v = redis.call('HGET', P .. 'i:' .. l, root)
    if v then
      local rh = tonumber(string.sub(v, 18))
      local dkey = P .. 'd:' .. l .. ':' .. math.floor(rh / 100)
      local v2 = redis.call('HGET', dkey, rh)
      redis.call('HSET', dkey, rh, v2 and (v2 .. ' ' .. label .. ':' .. h) or (label .. ':' .. h))
      local rstart = redis.call('ZSCORE', reg, l)
      redis.call('EXPIREAT', dkey, math.ceil((tonumber(rstart) + retain) / 1000))
      break
    end
  end
end
return {'ok', h}
