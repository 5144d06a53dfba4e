-- commit.lua: record an article and its verdict, but only if nothing the worker
-- read (RedisIndex::gather and fetch_candidates, plain commands, the counters
-- first) has changed since the counters were read (optimistic concurrency). No set is scanned and no list re-read here: the script reads
-- what was *inserted* since the gather instead.
--
-- Why that is enough: every insert takes the next handle of its bucket's
-- counter (n:) and stores its packed fingerprint under that handle (f:), in one
-- script. So the articles inserted into a bucket since the gather are exactly
-- the handles between the counter the gather read and the counter now. What
-- the gather read (block sets of this SimHash's blocks, the content and sketch
-- lists, the h: lists of the SimHashes resolved) can only have changed through
-- one of them sharing a block, the content hash's low 24 bits or a lookup
-- sketch hash with this article, which its packed fingerprint shows. Deletes
-- never change what was read (they leave tombstones) and their f: entry is
-- gone: skipped.
--
-- KEYS[1]  the bucket registry (ZSET label -> bucket start ms)
-- ARGV[1]  key prefix, ARGV[2] article id
-- ARGV[3]  the article's bucket label, ARGV[4] its bucket start (ms)
-- ARGV[5]  retention after a bucket starts (bucket length + window, ms)
-- ARGV[6]  SimHash, 16 hex     ARGV[7] SimHash, signed decimal (set member)
-- ARGV[8]  packed fingerprint  ARGV[9] meta
-- ARGV[10] content hash, 16 hex ("" = empty fingerprint: not indexed)
-- ARGV[11] content hash as a c: field (field24 in prelude.lua)
-- ARGV[12] root id of the cluster to link to ("" when unique)
-- ARGV[13] shape bits for a new bucket with no older one to size it by
-- ARGV[14] the 4 SimHash blocks (4 hex each, first block first), concatenated
-- ARGV[15] S, then S sketch hashes (8 hex)
-- then     the own bucket as the gather read it: shape bits ("" when it was
--          not read: new, or a preload), h: key, field and value read for the
--          SimHash, c: key and value read, 5 flags ('1': block d's set was
--          empty; the 5th: list in h: even when full), S times s: key, field
--          and value read. Without lists (last argument '0'): the shape bits
--          and the flags only.
-- then     B = live buckets the gather saw (-1: bulk preload, nothing to check),
--          and B times: label, counter read, in range (0/1), and which lists
--          were full when read ('1' per list: the content list, then the S
--          sketch lists; "" when not in range)
-- then     this process' token ("" = none: a preload), the
--          commit's sequence number, and '1' if the worker vouches for the
--          newest run of its own commits (src/index/redis/own_commits.rs)
-- last     '1': write the lookup lists (h:, c:, s:); '0': the worker holds a
--          replica (src/index/redis/replica.rs) and reads no lists, so none
--          are written. A bucket records which (n:L field l = '0': none), and
--          a worker of the other kind is refused rather than served wrong.
--
-- Returns {"ok", handle} | {"retry", reason} | {"replay"} | {"expired"} |
-- {"mode", label} (the bucket was written by workers of the other kind)
local P, id = ARGV[1], ARGV[2]
local lists = ARGV[#ARGV] ~= '0'
local token, seq = ARGV[#ARGV - 3], tonumber(ARGV[#ARGV - 2])
local vouched = ARGV[#ARGV - 1] == '1'
local reg = KEYS[1]
local label, start, retain = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local simhex, simdec, content, cfield = ARGV[6], ARGV[7], ARGV[10], ARGV[11]
local packed, root = ARGV[8], ARGV[12]
local blocks = {}
for d = 1, 4 do blocks[d] = string.sub(ARGV[14], 4 * d - 3, 4 * d) end
local S = tonumber(ARGV[15])
local sigs = {}
for s = 1, S do sigs[s] = ARGV[15 + s] end
local i = 16 + S

-- The own bucket's shape, h: key, field and value read for this SimHash, c:
-- and s: keys (and s: fields) and values ("" when the bucket was not read).
local k = tonumber(ARGV[i])
local hkey, hfield, hval, ckey, cval, empty
local skeys, sfields, svals = {}, {}, {}
if lists then
  hkey, hfield, hval = ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  ckey, cval = ARGV[i + 4], ARGV[i + 5]
  -- 4 flags: the block set of block d was empty ('1'); a 5th: list this
  -- article in its h: field even if the list is full (see append below)
  empty = ARGV[i + 6]
  for s = 1, S do
    local at = i + 4 + 3 * s
    skeys[s], sfields[s], svals[s] = ARGV[at], ARGV[at + 1], ARGV[at + 2]
  end
  i = i + 7 + 3 * S
else
  empty = ARGV[i + 1]
  i = i + 2
end
local known = k ~= nil

-- The tokens this article's gather read, as they appear in a packed
-- fingerprint (src/index/redis/codec.rs: SimHash u64 little-endian, content
-- u64 LE, then the sorted sketch's u32 LE): the 16-bit blocks, the low 24
-- bits of the content hash (what names its c: field, so an article with
-- another content hash but the same field is a conflict too), the lookup
-- sketch hashes. (An h: field is named by the SimHash's low 24 bits, which
-- hold its last block.)
-- `list[t]`: for a token read through a list, its position among the
-- bucket's full-list flags (1 the content list, 1 + s sketch list s).
local tokens, list = {}, {}
for d = 1, 4 do tokens[d] = string.sub(packed, 2 * d - 1, 2 * d) end
if content ~= '' then
  tokens[#tokens + 1] = string.sub(packed, 9, 11)
  list[#tokens] = 1
end
for s = 1, S do
  tokens[#tokens + 1] = string.sub(packed, 13 + 4 * s, 16 + 4 * s)
  list[#tokens] = 1 + s
end

-- Why the packed fingerprints `recs` (inserted since the gather; nil for a
-- deleted one; Redis gives false) change what this check read, or nil: one
-- has a block of this SimHash among its SimHash bytes, the low 24 bits of this
-- content hash as those of its content, or a lookup sketch hash in its sketch.
-- A list that was full when read (`full`, '1' at the token's list position)
-- cannot have changed: a full list is never appended to, so an article that
-- shares only that hash (a boilerplate line) is no conflict. The records are
-- searched as one string (one string.find per token, not one per token and
-- record: Lua calls into C are what costs here), and each hit is placed in its
-- record by offsets.
local function conflict(recs, full)
  local parts, ends, at = {}, {}, 0
  for r = 1, #recs do
    local rec = recs[r]
    if rec then
      parts[#parts + 1] = rec
      at = at + #rec
      ends[#ends + 1] = at
    end
  end
  if at == 0 then return nil end
  local all = table.concat(parts)
  for t = 1, #tokens do
    local token = tokens[t]
    local from = 1
    if list[t] and string.sub(full, list[t], list[t]) == '1' then from = #all + 1 end
    while from <= #all do
      local pos = string.find(all, token, from, true)
      if not pos then break end
      -- The record holding the hit and the hit's offset in it (0-based).
      local r, start = 1, 0
      while ends[r] < pos do start = ends[r]; r = r + 1 end
      local off = pos - 1 - start
      if t <= 4 then
        -- At an even offset: one of its four blocks (at an odd one the token
        -- straddles two blocks and names no set).
        if off % 2 == 0 and off + 2 <= 8 then return 'block' end
      elseif content ~= '' and t == 5 then
        if off == 8 then return 'content' end
      elseif off >= 16 and off + 4 <= ends[r] - start then
        return 'signature'
      end
      from = pos + 1
    end
  end
  return nil
end

-- Validation: the same live buckets, and in every bucket that received an
-- insert since the gather, neither this id nor anything that changes what was
-- read has appeared.
local live = redis.call('ZRANGE', reg, '0', '-1', 'WITHSCORES')
-- The own bucket's counter hash as read here (nil: not read)
local own_run
local B = tonumber(ARGV[i])
i = i + 1
if B < 0 then
  -- Bulk preload (RedisIndex::preload, benchmarks only): no gather, no checks.
  if find_id(P, live, id) then return {'replay'} end
  B = 0
elseif #live ~= 2 * B then
  return {'retry', 'buckets'}
end
for b = 1, B do
  local l, counter, inrange, full = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  i = i + 4
  if live[2 * b - 1] ~= l then return {'retry', 'buckets'} end
  -- n: counter, k: shape, l: lists kept; w, w0, ws, wn: the marker of the
  -- newest run of one process' inserts (src/index/redis/own_commits.rs)
  local nk = redis.call('HMGET', P .. 'n:' .. l, 'n', 'k', 'l', 'w', 'w0', 'ws', 'wn')
  if l == label then own_run = nk end
  if nk[2] and (nk[3] ~= '0') ~= lists then return {'mode', l} end
  -- The bucket expired since the gather (an article lagging by about a bucket):
  -- gather again, which no longer sees it.
  if not nk[1] and counter ~= '' then return {'retry', 'buckets'} end
  if (nk[1] or '') ~= counter then
    -- Stored since the gather (which read this bucket's i: after its counter),
    -- by a racing copy of this entry: its stored verdict is the answer.
    local function stored()
      return nk[2] and redis.call('HEXISTS', ids_key(P, l, tonumber(nk[2]), id), id) == 1
    end
    if inrange ~= '1' then
      if stored() then return {'replay'} end
    else
      local from, to = (tonumber(counter) or 0) + 1, tonumber(nk[1])
      -- Handles w0..n were all inserted by this process' commits, sent before
      -- this one (ws < seq): the worker has tested them against this article,
      -- the same tests as below, and vouches that none matters. wn = n: the
      -- newest insert is the run's (a writer that keeps no marker, such as an
      -- older version of this script, ends every run).
      if vouched and nk[4] == token and nk[7] == nk[1]
        and (tonumber(nk[6]) or math.huge) < seq then
        to = math.min(to, tonumber(nk[5]) - 1)
      end
      -- Only an article inserted since can hold the id: one HEXISTS, not a read
      -- of every new article's meta.
      if from <= to and stored() then return {'replay'} end
      -- Far behind (a stalled worker): reading everything again is cheaper.
      if to - from >= 256 then return {'retry', 'behind'} end
      while from <= to do
        local chunk = math.floor(from / 100)
        local last = math.min(to, chunk * 100 + 99)
        local handles = {}
        for x = from, last do handles[#handles + 1] = string.format('%d', x - chunk * 100) end
        local why = conflict(redis.call('HMGET', P .. 'f:' .. l .. ':' .. chunk, unpack(handles)), full)
        if why then return {'retry', why} end
        from = last + 1
      end
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
-- The new handle. Where validation read the counter (own_run), it is that
-- plus one, written below along with the run marker: one call fewer than
-- an HINCRBY here.
local hn
if own_run then
  hn = (tonumber(own_run[1]) or 0) + 1
else
  hn = redis.call('HINCRBY', nkey, 'n', '1')
end
local fresh = hn == 1 -- a new bucket: every key written below is new
local h = string.format('%d', hn)
local counter = {}
if own_run then counter = {'n', h} end
if fresh then
  -- Shape the bucket by the newest older bucket's size (or the configured guess).
  local articles, older = nil, nil
  for b = #live - 1, 1, -2 do
    if tonumber(live[b + 1]) < start then
      local nk = redis.call('HMGET', P .. 'n:' .. live[b], 'n', 'k')
      articles, older = tonumber(nk[1] or ''), tonumber(nk[2] or '')
      break
    end
  end
  if articles then
    k = 0
    while k < 22 and articles > 128 * 2 ^ k do k = k + 1 end
    -- At most one bit smaller than that bucket: it may still be filling (a
    -- backfill, feeds out of time order), and a bucket shaped far too small
    -- turns its hashes into hash tables (~3x the memory).
    if older and k < older - 1 then k = older - 1 end
  else
    k = tonumber(ARGV[13])
  end
  -- r: how long the bucket's keys live after it starts (bucket length +
  -- window): a process configured otherwise refuses to start (RedisIndex::connect).
  redis.call('HSET', nkey, 'k', k, 'r', ARGV[5])
  if not lists then redis.call('HSET', nkey, 'l', '0') end
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

-- Extend this process' run of inserts, or start one (own_commits.rs).
if token ~= '' then
  local w, ws = nil, nil
  if own_run then w, ws = own_run[4], own_run[6] end
  if fresh then w = nil end
  if w ~= token then
    redis.call('HSET', nkey, 'w', token, 'w0', h, 'ws', ARGV[#ARGV - 2], 'wn', h, unpack(counter))
  elseif (tonumber(ws) or math.huge) < seq then
    redis.call('HSET', nkey, 'ws', ARGV[#ARGV - 2], 'wn', h, unpack(counter))
  else
    redis.call('HSET', nkey, 'wn', h, unpack(counter))
  end
else
  if own_run then redis.call('HSET', nkey, unpack(counter)) end
  -- An insert of no process' run (a preload) ends the run.
  redis.call('HDEL', nkey, 'w')
end

-- f:, m: (and d:) entries live in chunk hn / 100 under field hn % 100.
local chunk = string.format('%d', math.floor(hn / 100))
local slot = string.format('%d', hn % 100)
local ikey = ids_key(P, label, k, id)
set_field(ikey, id, simhex .. ':' .. h, expire_at)
local fkey = P .. 'f:' .. label .. ':' .. chunk
redis.call('HSET', fkey, slot, ARGV[8])
local mkey = P .. 'm:' .. label .. ':' .. chunk
redis.call('HSET', mkey, slot, ARGV[9])
if fresh or hn % 100 == 0 then
  redis.call('EXPIREAT', fkey, expire_at)
  redis.call('EXPIREAT', mkey, expire_at)
end

if content ~= '' and lists then
  if fresh or not known then
    -- Names the worker could not give (a bucket opened here, or a preload).
    hkey, hfield = P .. 'h:' .. label .. ':' .. top(simhex, k), field24(simhex)
    ckey = P .. 'c:' .. label .. ':' .. top(content, k)
    hval = redis.call('HGET', hkey, hfield) or ''
    cval = redis.call('HGET', ckey, cfield) or ''
    for s = 1, S do
      skeys[s] = P .. 's:' .. label .. ':' .. low(sigs[s], k + 2)
      sfields[s] = high(sigs[s], k + 2)
      svals[s] = redis.call('HGET', skeys[s], sfields[s]) or ''
    end
  end
end
if content ~= '' then
  for d = 1, 4 do
    local bkey = block_key(P, label, k, d, blocks[d])
    redis.call('SADD', bkey, simdec)
    -- Empty at the gather and unchanged since (validated): created just now.
    if fresh or not known or string.sub(empty, d, d) == '1' then
      redis.call('EXPIREAT', bkey, expire_at)
    end
  end
end
if content ~= '' and lists then
  -- Append the handle to the lists read by the gather (unchanged since: the
  -- value is known), unless the list already names 8 articles
  -- (LISTED_PER_HASH in src/index/mod.rs): a hash that many articles of one
  -- bucket share (a boilerplate line, a viral copy) would otherwise grow a
  -- list every check through it fetches whole, and values over 64 bytes take
  -- the hash out of the compact listpack encoding. Later articles are still
  -- found through the first 8; they are just not listed themselves. An h:
  -- field names a SimHash only by some of its bits (field24), so a full list
  -- may name other SimHashes only; then this one is listed anyway (`force`,
  -- the 5th flag: the worker saw no article with this SimHash in the bucket),
  -- or an article with it would be found through no list at all.
  local function append(key, field, old, force)
    if old == '' then
      set_field(key, field, h, expire_at)
    elseif force or select(2, string.gsub(old, ' ', ' ')) < 7 then
      set_field(key, field, old .. ' ' .. h, expire_at)
    end
  end
  append(hkey, hfield, hval, string.sub(empty, 5, 5) == '1')
  append(ckey, cfield, cval)
  for s = 1, S do append(skeys[s], sfields[s], svals[s]) end
end

-- Link a duplicate to its cluster's root (in the root's bucket, expiring with it).
if root ~= '' then
  local l, lstart, _, _, rslot, rchunk = find_id(P, live, root)
  if l then
    local dkey = P .. 'd:' .. l .. ':' .. rchunk
    local v2 = redis.call('HGET', dkey, rslot)
    redis.call('HSET', dkey, rslot, v2 and (v2 .. ' ' .. label .. ':' .. h) or (label .. ':' .. h))
    redis.call('EXPIREAT', dkey, math.ceil((tonumber(lstart) + retain) / 1000))
  end
end
return {'ok', h}
