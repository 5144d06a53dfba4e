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
-- ARGV[1]  key prefix         ARGV[2] article id
-- ARGV[3]  the id's hash: the first 6 hex digits of its SHA-1 (ids_key)
-- ARGV[4]  the article's bucket label, ARGV[5] its bucket start (ms)
-- ARGV[6]  retention after a bucket starts (bucket length + window, ms)
-- ARGV[7]  when the bucket's keys expire: (start + retention) / 1000 rounded
--          up, unix seconds
-- ARGV[8]  SimHash, 16 hex (its four 16-bit blocks, first block first)
-- ARGV[9]  SimHash, signed decimal (set member)
-- ARGV[10] packed fingerprint  ARGV[11] meta
-- ARGV[12] content hash, 16 hex ("" = empty fingerprint: not indexed)
-- ARGV[13] root id of the cluster to link to ("" when unique), ARGV[14] its
--          hash (as ARGV[3]), ARGV[15] the label of the bucket to look for it
--          in first ("" = not known)
-- ARGV[16] shape bits for a new bucket with no older one to size it by
-- ARGV[17] S: the lookup sketch hashes, the first S of the packed sketch
-- ARGV[18] '1': write the lookup lists (h:, c:, s:); '0': the worker holds a
--          replica (src/index/redis/replica.rs) and reads no lists, so none
--          are written. A bucket records which (n:L field l = '0': none), and
--          a worker of the other kind is refused rather than served wrong.
-- ARGV[19] the own bucket's shape bits as the check read it ("" when it was
--          not read: new, or a preload)
-- ARGV[20] 5 flags ('1': block d's set was empty when read; the 5th: list in
--          h: even when full)
-- then     with lists only: the content hash as a c: field (field24 in
--          prelude.lua), the S sketch hashes (8 hex), and when the own
--          bucket was read: h: key, field and value read for the SimHash, c:
--          key and value read, S times s: key, field and value read
-- then     the live buckets the gather saw, four arguments each: label,
--          counter read, in range (0/1), and which lists were full when read
--          ('1' per list: the content list, then the S sketch lists; "" when
--          not in range); or the one argument '-1' for a bulk preload
--          (nothing to check)
-- last     this process' token ("" = none: a preload), the commit's sequence
--          number, and '1' if the worker vouches for the newest run of its own
--          commits (src/index/redis/own_commits.rs)
--
-- Returns {"ok", handle} | {"retry", reason} | {"replay"} | {"expired"} |
-- {"mode", label} (the bucket was written by workers of the other kind)
--
-- Written for the cost of a call, which is mostly Lua's own work, not the
-- commands': every argument, reply, string built and number parsed from a
-- string (tonumber calls strtod twice) is a measurable share of a commit
-- (docs/benchmarks.md, "The commit script's instructions"). So numbers stay
-- strings where they are only compared or passed on, work needed only by a
-- rare branch is done in that branch, and the worker sends what it can
-- compute cheaper.
local P, id, idhash, label = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local expire_at = ARGV[7]
local simhex, simdec, packed, meta = ARGV[8], ARGV[9], ARGV[10], ARGV[11]
local content, root = ARGV[12], ARGV[13]
local lists = ARGV[18] == '1'
local k = tonumber(ARGV[19])
local known = k ~= nil
local empty = ARGV[20]
local n_args = #ARGV
local token, seq = ARGV[n_args - 2], ARGV[n_args - 1]
local vouched = ARGV[n_args] == '1'

-- Decimal strings of non-negative integers without leading zeros compare as
-- numbers by length first (no tonumber); false (a missing field) is never less.
local function lt(a, b)
  return a and (#a < #b or (#a == #b and a < b))
end

-- With lists: the own bucket's h:, c: and s: keys (and fields) and the values
-- the gather read there.
local S, sigs, cfield
local hkey, hfield, hval, ckey, cval
local skeys, sfields, svals = {}, {}, {}
local i = 21
if lists then
  S = tonumber(ARGV[17])
  cfield = ARGV[21]
  sigs = {}
  for s = 1, S do sigs[s] = ARGV[21 + s] end
  i = 22 + S
  if known then
    hkey, hfield, hval = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    ckey, cval = ARGV[i + 3], ARGV[i + 4]
    for s = 1, S do
      local at = i + 2 + 3 * s
      skeys[s], sfields[s], svals[s] = ARGV[at], ARGV[at + 1], ARGV[at + 2]
    end
    i = i + 5 + 3 * S
  end
end

-- The tokens this article's gather read, as they appear in a packed
-- fingerprint (src/index/redis/codec.rs: SimHash u64 little-endian, content
-- u64 LE, then the sorted sketch's u32 LE): the 16-bit blocks, the low 24
-- bits of the content hash (what names its c: field, so an article with
-- another content hash but the same field is a conflict too), the lookup
-- sketch hashes (the first S of the sketch). (An h: field is named by the
-- SimHash's low 24 bits, which hold its last block.)
-- `list[t]`: for a token read through a list, its position among the
-- bucket's full-list flags (1 the content list, 1 + s sketch list s).
-- Built by the first validation that needs them: most commits need none.
local tokens, list
local function build_tokens()
  tokens = {string.sub(packed, 1, 2), string.sub(packed, 3, 4),
    string.sub(packed, 5, 6), string.sub(packed, 7, 8)}
  list = {}
  if content ~= '' then
    tokens[5] = string.sub(packed, 9, 11)
    list[5] = 1
  end
  for s = 1, tonumber(ARGV[17]) do
    tokens[#tokens + 1] = string.sub(packed, 13 + 4 * s, 16 + 4 * s)
    list[#tokens] = 1 + s
  end
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
  if not tokens then build_tokens() end
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
-- read has appeared. (Labels only: a score would be formatted as a double by
-- Redis and parsed back by Lua on every commit, and none is needed here.)
local live = redis.call('ZRANGE', KEYS[1], '0', '-1')
-- The own bucket's counter hash as read here (nil: not read)
local own_run
-- The shapes read, by label (for the root link: ARGV[13])
local shapes = root ~= '' and {} or nil
if ARGV[i] == '-1' then
  -- Bulk preload (RedisIndex::preload, benchmarks only): no gather, no checks.
  if find_id(P, live, id, idhash) then return {'replay'} end
else
  local B = (n_args - 2 - i) / 4
  if #live ~= B then return {'retry', 'buckets'} end
  for b = 1, B do
    local l, counter, inrange, full = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
    i = i + 4
    if live[b] ~= l then return {'retry', 'buckets'} end
    -- n: counter, k: shape, l: lists kept; in the own bucket also w, w0, ws,
    -- wn: the marker of the newest run of one process' inserts
    -- (src/index/redis/own_commits.rs)
    local nk
    if l == label then
      nk = redis.call('HMGET', P .. 'n:' .. l, 'n', 'k', 'l', 'w', 'w0', 'ws', 'wn')
      own_run = nk
    else
      nk = redis.call('HMGET', P .. 'n:' .. l, 'n', 'k', 'l')
    end
    if shapes then shapes[l] = nk[2] end
    if nk[2] and (nk[3] ~= '0') ~= lists then return {'mode', l} end
    -- The bucket expired since the gather (an article lagging by about a bucket):
    -- gather again, which no longer sees it.
    if not nk[1] and counter ~= '' then return {'retry', 'buckets'} end
    if (nk[1] or '') ~= counter then
      -- Stored since the gather (which read this bucket's i: after its counter),
      -- by a racing copy of this entry: its stored verdict is the answer.
      local function stored()
        return nk[2] and redis.call('HEXISTS', ids_key(P, l, tonumber(nk[2]), idhash), id) == 1
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
        if vouched and l ~= label then
          -- Another bucket's marker (rarely needed: read only now).
          nk = redis.call('HMGET', P .. 'n:' .. l, 'n', 'k', 'l', 'w', 'w0', 'ws', 'wn')
        end
        if vouched and nk[4] == token and nk[7] == nk[1] and lt(nk[6], seq) then
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
end

-- Past its retention already (an old article): decide, but store nothing.
-- Only a bucket not found above can be: an existing one's keys, the n: hash
-- among them, expire at ARGV[7], in the retention's last second at the latest.
local now_ms
if not (own_run and own_run[2]) then
  local t = redis.call('TIME')
  now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if tonumber(ARGV[5]) + tonumber(ARGV[6]) <= now_ms then return {'expired'} end
end

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
if fresh then
  -- Shape the bucket by the newest older bucket's size (or the configured
  -- guess). Labels are fixed-width UTC times: they sort as the buckets do.
  local articles, older = nil, nil
  for b = #live, 1, -1 do
    if live[b] < label then
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
    k = tonumber(ARGV[16])
  end
  -- r: how long the bucket's keys live after it starts (bucket length +
  -- window): a process configured otherwise refuses to start (RedisIndex::connect).
  redis.call('HSET', nkey, 'k', string.format('%d', k), 'r', ARGV[6])
  if not lists then redis.call('HSET', nkey, 'l', '0') end
  redis.call('EXPIREAT', nkey, expire_at)
  redis.call('ZADD', KEYS[1], ARGV[5], label)
  if not now_ms then
    local t = redis.call('TIME')
    now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('(%d', now_ms - tonumber(ARGV[6])))
  if redis.call('TTL', KEYS[1]) < 0 then
    redis.call('EXPIREAT', KEYS[1], expire_at)
  else
    redis.call('EXPIREAT', KEYS[1], expire_at, 'GT')
  end
end

-- The shape of an existing bucket the gather did not read (an article with an
-- empty fingerprint, a preload).
if not k then k = tonumber(redis.call('HGET', nkey, 'k')) end

-- Extend this process' run of inserts, or start one (own_commits.rs). Where
-- validation read the counter, the new one is written here too.
local counter = own_run and {'n', h} or {}
if token ~= '' then
  local w, ws = nil, nil
  if own_run and not fresh then w, ws = own_run[4], own_run[6] end
  if w ~= token then
    redis.call('HSET', nkey, 'w', token, 'w0', h, 'ws', seq, 'wn', h, unpack(counter))
  elseif lt(ws, seq) then
    redis.call('HSET', nkey, 'ws', seq, 'wn', h, unpack(counter))
  else
    redis.call('HSET', nkey, 'wn', h, unpack(counter))
  end
else
  if own_run then redis.call('HSET', nkey, unpack(counter)) end
  -- An insert of no process' run (a preload) ends the run.
  redis.call('HDEL', nkey, 'w')
end

-- f:, m: (and d:) entries live in chunk hn / 100 under field hn % 100: cut
-- from h's digits.
local chunk, slot = '0', h
if hn >= 100 then
  chunk, slot = string.sub(h, 1, -3), string.sub(h, -2)
  if string.byte(slot) == 48 then slot = string.sub(slot, 2) end
end
set_field(ids_key(P, label, k, idhash), id, simhex .. ':' .. h, expire_at)
local fkey = P .. 'f:' .. label .. ':' .. chunk
redis.call('HSET', fkey, slot, packed)
local mkey = P .. 'm:' .. label .. ':' .. chunk
redis.call('HSET', mkey, slot, meta)
if fresh or slot == '0' then
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
  -- Empty at the gather and unchanged since (validated): created just now.
  local created = fresh or not known
  local some = created or string.find(empty, '1', 1, true)
  for d = 1, 4 do
    local block = string.sub(simhex, 4 * d - 3, 4 * d)
    local bkey = block_key(P, label, k, d, block)
    redis.call('SADD', bkey, simdec)
    if some and (created or string.byte(empty, d) == 49) then
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

-- Link a duplicate to its cluster's root, in the root's bucket (tried first
-- where the worker knows it: ARGV[15]). The d: hash gets the root bucket's
-- expiry when this creates it (set_field).
if root ~= '' then
  local hint = ARGV[15]
  local l, _, _, rslot, rchunk = find_id(P, live, root, ARGV[14], hint ~= '' and hint or nil, shapes)
  if l then
    local dkey = P .. 'd:' .. l .. ':' .. string.format('%d', rchunk)
    local field = string.format('%d', rslot)
    local v2 = redis.call('HGET', dkey, field)
    local link = label .. ':' .. h
    if redis.call('HSET', dkey, field, v2 and (v2 .. ' ' .. link) or link, '', '') == 2 then
      local lstart = redis.call('ZSCORE', KEYS[1], l)
      redis.call('EXPIREAT', dkey, string.format('%d', math.ceil((tonumber(lstart) + tonumber(ARGV[6])) / 1000)))
    end
  end
end
return {'ok', h}
