-- commit.lua: record an article and its verdict, but only if nothing the worker
-- read in gather.lua (and resolve.lua) has changed since (optimistic
-- concurrency). Redis does O(1) work per key read: no set is scanned here.
--
-- Why the checks are enough: block sets and handle lists (h:, c:, s: fields)
-- only ever grow (a delete leaves its handle behind as a tombstone, skipped on
-- read), so an unchanged size means unchanged contents; a bucket whose handle
-- counter has not moved received no insert at all, so its keys need no check.
-- An article joining a block set under a SimHash already in it does not grow
-- the set: that SimHash was either beyond max_distance (then so is the
-- newcomer) or resolved, and its h: field, whose length is checked, grows.
--
-- KEYS[1]  the bucket registry (ZSET label -> bucket start ms)
-- ARGV[1]  key prefix, ARGV[2] article id
-- ARGV[3]  the article's bucket label, ARGV[4] its bucket start (ms)
-- ARGV[5]  retention after a bucket starts (bucket length + window, ms)
-- ARGV[6]  SimHash, 16 hex     ARGV[7] SimHash, signed decimal (set member)
-- ARGV[8]  packed fingerprint  ARGV[9] meta
-- ARGV[10] content hash, 16 hex ("" = empty fingerprint: not indexed)
-- ARGV[11] content hash, signed decimal
-- ARGV[12] root id of the cluster to link to ("" when unique)
-- ARGV[13] shape bits for a new bucket with no older one to size it by
-- ARGV[14] D, then D distinct blocks (4 hex)
-- then     S, then S times: sketch hash (8 hex), the same in decimal
-- then     the own bucket's h: key for the SimHash and the value read ("", "" if
--          the own bucket was not read)
-- then     B = live buckets gather.lua saw (-1: bulk preload, nothing to check),
--          and B times: label, counter, in range (0/1), and when in range: shape
--          bits, c: key and value read, S times s: key and value read, D block
--          set sizes, R, R times: h: key, field, value length (from resolve.lua)
--
-- Returns {"ok", handle} | {"retry", reason} | {"replay"} | {"expired"}
local P, id = ARGV[1], ARGV[2]
local reg = KEYS[1]
local label, start, retain = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local simhex, simdec, content, cdec = ARGV[6], ARGV[7], ARGV[10], ARGV[11]
local root = ARGV[12]
local D = tonumber(ARGV[14])
local blocks = {}
for d = 1, D do blocks[d] = ARGV[14 + d] end
local i = 15 + D
local S = tonumber(ARGV[i])
local sigs = {}
for s = 1, S do sigs[s] = {ARGV[i + 2 * s - 1], ARGV[i + 2 * s]} end
i = i + 2 * S + 1

-- The own bucket's h: key and the value read for this SimHash ("" when the
-- bucket was not read: new, or a preload).
local hkey, hval = ARGV[i], ARGV[i + 1]
i = i + 2

-- Validation: the same live buckets, and in every bucket that received an
-- insert since the gather, neither this id nor anything read has appeared.
local live = redis.call('ZRANGE', reg, '0', '-1', 'WITHSCORES')
local B = tonumber(ARGV[i])
i = i + 1
if B < 0 then
  -- Bulk preload (RedisIndex::preload, benchmarks only): no gather, no checks.
  if find_id(P, live, id) then return {'replay'} end
  B = 0
elseif #live ~= 2 * B then
  return {'retry', 'buckets'}
end
local known, k, ckey, cval = false, nil, nil, nil
local skeys, svals, sizes = {}, {}, {}
for b = 1, B do
  local l, counter, inrange = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  i = i + 3
  if live[2 * b - 1] ~= l then return {'retry', 'buckets'} end
  local nk = redis.call('HMGET', P .. 'n:' .. l, 'n', 'k')
  local moved = (nk[1] or '') ~= counter
  if moved and nk[2] and redis.call('HEXISTS', ids_key(P, l, tonumber(nk[2]), id), id) == 1 then
    return {'replay'}
  end
  if inrange == '1' then
    -- shape, c: key and value, S s: keys and values, D set sizes, R resolved
    local bk, bckey, bcval = tonumber(ARGV[i]), ARGV[i + 1], ARGV[i + 2]
    i = i + 3
    local bskeys, bsvals, bsizes = {}, {}, {}
    for s = 1, S do
      bskeys[s], bsvals[s] = ARGV[i], ARGV[i + 1]
      i = i + 2
    end
    for d = 1, D do bsizes[d] = tonumber(ARGV[i + d - 1]) end
    i = i + D
    local R = tonumber(ARGV[i])
    if moved then
      for d = 1, D do
        if redis.call('SCARD', P .. 'b:' .. l .. ':' .. blocks[d]) ~= bsizes[d] then
          return {'retry', 'block'}
        end
      end
      if redis.call('HSTRLEN', bckey, cdec) ~= #bcval then return {'retry', 'content'} end
      for s = 1, S do
        if redis.call('HSTRLEN', bskeys[s], sigs[s][2]) ~= #bsvals[s] then
          return {'retry', 'signature'}
        end
      end
      for r = 1, R do
        local j = i + 3 * r - 2
        if redis.call('HSTRLEN', ARGV[j], ARGV[j + 1]) ~= tonumber(ARGV[j + 2]) then
          return {'retry', 'simhash'}
        end
      end
    end
    i = i + 1 + 3 * R
    if l == label then
      known, k, ckey, cval, skeys, svals, sizes = true, bk, bckey, bcval, bskeys, bsvals, bsizes
    end
  end
end

-- Past its retention already (an old article): decide, but store nothing.
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if start + retain <= now_ms then return {'expired'} end
-- Numbers handed to redis.call are formatted with sprintf("%.14g") each time:
-- format once.
local expire_at = string.format('%d', math.ceil((start + retain) / 1000))

local nkey = P .. 'n:' .. label
local hn = redis.call('HINCRBY', nkey, 'n', '1')
local fresh = hn == 1 -- a new bucket: every key written below is new
local h = string.format('%d', hn)
if fresh then
  -- Shape the bucket by the newest older bucket's size (or the configured guess).
  local articles = nil
  for b = #live - 1, 1, -2 do
    if tonumber(live[b + 1]) < start then
      articles = tonumber(redis.call('HGET', P .. 'n:' .. live[b], 'n') or '')
      break
    end
  end
  if articles then
    k = 0
    while k < 22 and articles > 48 * 2 ^ k do k = k + 1 end
  else
    k = tonumber(ARGV[13])
  end
  redis.call('HSET', nkey, 'k', k)
  redis.call('EXPIREAT', nkey, expire_at)
  redis.call('ZADD', reg, start, label)
  redis.call('ZREMRANGEBYSCORE', reg, '-inf', '(' .. (now_ms - retain))
  if redis.call('TTL', reg) < 0 then
    redis.call('EXPIREAT', reg, expire_at)
  else
    redis.call('EXPIREAT', reg, expire_at, 'GT')
  end
end

-- The shape of an existing bucket the gather did not read (an article with an
-- empty fingerprint, a preload).
if not k then k = tonumber(redis.call('HGET', nkey, 'k')) end

local chunk = string.format('%d', math.floor(hn / 100))
local ikey = ids_key(P, label, k, id)
set_field(ikey, id, simhex .. ':' .. h, expire_at)
local fkey = P .. 'f:' .. label .. ':' .. chunk
redis.call('HSET', fkey, h, ARGV[8])
local mkey = P .. 'm:' .. label .. ':' .. chunk
redis.call('HSET', mkey, h, ARGV[9])
if fresh or hn % 100 == 0 then
  redis.call('EXPIREAT', fkey, expire_at)
  redis.call('EXPIREAT', mkey, expire_at)
end

if content ~= '' then
  if fresh or not known then
    -- Names the worker could not give (a bucket opened here, or a preload).
    hkey = P .. 'h:' .. label .. ':' .. top(simhex, k)
    ckey = P .. 'c:' .. label .. ':' .. top(content, k)
    hval = redis.call('HGET', hkey, simdec) or ''
    cval = redis.call('HGET', ckey, cdec) or ''
    for s = 1, S do
      skeys[s] = P .. 's:' .. label .. ':' .. top(sigs[s][1], k + 2)
      svals[s] = redis.call('HGET', skeys[s], sigs[s][2]) or ''
    end
  end
  for d = 1, D do
    local bkey = P .. 'b:' .. label .. ':' .. blocks[d]
    redis.call('SADD', bkey, simdec)
    -- Empty at the gather and unchanged since (validated): created just now.
    if fresh or not known or sizes[d] == 0 then
      redis.call('EXPIREAT', bkey, expire_at)
    end
  end
  -- Append the handle to the lists read by the gather (unchanged since: the
  -- value is known).
  local function append(key, field, old)
    set_field(key, field, old == '' and h or (old .. ' ' .. h), expire_at)
  end
  append(hkey, simdec, hval)
  append(ckey, cdec, cval)
  for s = 1, S do append(skeys[s], sigs[s][2], svals[s]) end
end

-- Link a duplicate to its cluster's root (in the root's bucket, expiring with it).
if root ~= '' then
  local l, lstart, _, _, rh, rchunk = find_id(P, live, root)
  if l then
    local dkey = P .. 'd:' .. l .. ':' .. rchunk
    local v2 = redis.call('HGET', dkey, rh)
    redis.call('HSET', dkey, rh, v2 and (v2 .. ' ' .. label .. ':' .. h) or (label .. ':' .. h))
    redis.call('EXPIREAT', dkey, math.ceil((tonumber(lstart) + retain) / 1000))
  end
end
return {'ok', h}
