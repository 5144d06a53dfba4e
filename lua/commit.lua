-- commit.lua: record a batch of articles and their verdicts, each only if
-- nothing inserted since the view it was decided on could have changed it.
-- Arguments: src/index/redis/commit.rs (Batch, CommitArgs; pinned by a test).
-- Every insert takes the next handle of its bucket (n: field n) and stores its
-- packed fingerprint under it (f:): what a bucket received since a view are the
-- handles after the view's counter. In order, so an earlier article of the
-- batch counts for a later one as any insert since its view does. Returns per
-- article {"ok", handle} | {"retry", why} | {"replay"} | {"expired"} | {"layout", label}

local P, retention = ARGV[1], tonumber(ARGV[2])
local live = redis.call('ZRANGE', KEYS[1], '0', '-1')
local t = redis.call('TIME'); local now = t[1] * 1000 + math.floor(t[2] / 1000)
-- Per bucket, read once and kept current: its n: fields {n, k, l}, its shape,
-- recs[l][h] the packed fingerprint of handle h ('' when deleted).
local state, shapes, recs = {}, {}, {}
local function bucket(l)
  if not state[l] then state[l], recs[l] = redis.call('HMGET', P .. 'n:' .. l, 'n', 'k', 'l'), {}; shapes[l] = state[l][2] end
  return state[l]
end

-- The packed fingerprints of handles from..to of bucket l: one HMGET per
-- chunk of those not read yet.
local function records(l, from, to)
  local rs, out = recs[l], {}
  for chunk = math.floor(from / HANDLES_PER_CHUNK), math.floor(to / HANDLES_PER_CHUNK) do
    local want, slots = {}, {}
    for x = math.max(from, chunk * HANDLES_PER_CHUNK), math.min(to, (chunk + 1) * HANDLES_PER_CHUNK - 1) do
      if not rs[x] then want[#want + 1], slots[#slots + 1] = x, string.format('%d', x % HANDLES_PER_CHUNK) end
    end
    local got = #want > 0 and redis.call('HMGET', P .. 'f:' .. l .. ':' .. chunk, unpack(slots))
    for n = 1, #want do rs[want[n]] = got[n] or '' end
  end
  for x = from, to do out[#out + 1] = rs[x] end
  return out
end

-- Why one of `rs` meets article `a` (src/index/meet.rs), or nil. a.tokens: its
-- keys as packed (codec.rs). A hit counts only where its key lies in a record:
-- a block at an even offset of the SimHash, the content at 8, a sketch hash
-- 4-aligned from 16 on, before the number sketch (count: the last byte). A list
-- full in the view (`full`: '1' at a.list[t]) is never appended to: no conflict
-- through it. One string.find per key over all records joined (calls into C
-- are what a commit costs).
local function conflict(a, rs, full)
  local parts, ends, sig_end, at = {}, {}, {}, 0
  for _, r in ipairs(rs) do
    if r ~= '' then
      at = at + #r
      parts[#parts + 1], sig_end[#parts + 1], ends[#parts + 1] = r, #r - 1 - 2 * string.byte(r, #r), at
    end
  end
  local all = table.concat(parts)
  for t, token in ipairs(a.tokens) do
    local li = a.list[t]
    local pos = not (li and string.sub(full, li, li) == '1') and string.find(all, token, 1, true)
    while pos do
      local r = 1; while ends[r] < pos do r = r + 1 end
      local off = pos - 1 - (ends[r - 1] or 0)
      if (t <= 4 and off % 2 == 0 and off <= 6) or (t == 5 and off == 8)
        or (t > 5 and off >= 16 and off % 4 == 0 and off + 4 <= sig_end[r]) then
        return t <= 4 and 'block' or (t == 5 and 'content' or 'signature')
      end
      pos = string.find(all, token, pos + 1, true)
    end
  end
  return nil
end

-- Validation: the live buckets are the view's (from ARGV[at], 4 per bucket),
-- and each one that received inserts since holds neither this id nor, if
-- searched, an article that meets this one.
local function check(a, at, nb)
  if nb < 0 then -- a bulk preload (RedisIndex::preload, benchmarks only)
    return find_id(P, live, a.id, a.idhash, nil, shapes) and {'replay'} or nil
  end
  if #live ~= nb then return {'retry', 'buckets'} end
  for b = 1, nb do
    local l, counter, inrange, full = ARGV[at], ARGV[at + 1], ARGV[at + 2] == '1', ARGV[at + 3]
    local nk = bucket(l)
    at = at + 4
    if live[b] ~= l then return {'retry', 'buckets'} end
    if nk[2] and nk[3] ~= '0' then return {'layout', l} end
    if not nk[1] and counter ~= '' then return {'retry', 'buckets'} end -- expired since
    local from, to = (tonumber(counter) or 0) + 1, tonumber(nk[1] or '0')
    if from <= to and nk[2] and redis.call('HEXISTS', ids_key(P, l, tonumber(nk[2]), a.idhash), a.id) == 1 then return {'replay'} end
    if inrange and to - from >= 256 then return {'retry', 'behind'} end -- catching up is cheaper
    local why = inrange and from <= to and conflict(a, records(l, from, to), full)
    if why then return {'retry', why} end
  end
end

-- Store article `a`: the next handle of its bucket, i:, f:, m:, the block
-- sets, the link to its cluster's root (d:), opening the bucket if it is new.
local function store(a)
  local nk, nkey = bucket(a.label), P .. 'n:' .. a.label
  if not nk[2] and tonumber(a.start) + retention <= now then return {'expired'} end -- stored nowhere
  local hn = (tonumber(nk[1]) or 0) + 1
  local h, expire_at = string.format('%d', hn), a.expire_at
  nk[1], recs[a.label][hn] = h, a.packed
  redis.call('HSET', nkey, 'n', h)
  if hn == 1 then -- a new bucket, shaped by the worker; r: retention; l = 0: this layout
    nk[2], nk[3], shapes[a.label] = a.shape, '0', a.shape
    redis.call('HSET', nkey, 'k', nk[2], 'r', string.format('%d', retention), 'l', '0')
    redis.call('EXPIREAT', nkey, expire_at)
    redis.call('ZADD', KEYS[1], a.start, a.label)
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('(%d', now - retention))
    redis.call('EXPIREAT', KEYS[1], expire_at, redis.call('TTL', KEYS[1]) < 0 and 'NX' or 'GT')
    live = redis.call('ZRANGE', KEYS[1], '0', '-1')
  end
  local k = tonumber(nk[2])
  local chunk, slot = math.floor(hn / HANDLES_PER_CHUNK), string.format('%d', hn % HANDLES_PER_CHUNK) -- of f:, m:
  set_field(ids_key(P, a.label, k, a.idhash), a.id, a.simhex .. ':' .. h, expire_at)
  for family, value in pairs({f = a.packed, m = a.meta}) do
    local key = P .. family .. ':' .. a.label .. ':' .. chunk
    redis.call('HSET', key, slot, value)
    if hn == 1 or slot == '0' then redis.call('EXPIREAT', key, expire_at) end
  end
  for d = 1, a.indexed and 4 or 0 do
    local bkey = block_key(P, a.label, k, d, string.sub(a.simhex, 4 * d - 3, 4 * d))
    redis.call('SADD', bkey, a.simdec)
    -- A set the view saw empty (or in a bucket it does not know) may be new.
    if hn == 1 or a.empty == '' or string.byte(a.empty, d) == 49 then redis.call('EXPIREAT', bkey, expire_at) end
  end
  -- Link a duplicate to its root, in the root's bucket (d:, with that bucket's expiry).
  local l, _, _, rslot, rchunk = find_id(P, a.root ~= '' and live or {}, a.root, a.root_hash, a.hint ~= '' and a.hint or nil, shapes)
  if l then
    local dkey, field = P .. 'd:' .. l .. ':' .. string.format('%d', rchunk), string.format('%d', rslot)
    local old, link = redis.call('HGET', dkey, field), a.label .. ':' .. h
    if redis.call('HSET', dkey, field, old and (old .. ' ' .. link) or link, '', '') == 2 then
      local lstart = tonumber(redis.call('ZSCORE', KEYS[1], l))
      redis.call('EXPIREAT', dkey, string.format('%d', math.ceil((lstart + retention) / 1000)))
    end
  end
  return {'ok', h}
end

local out, at = {}, 3
while at <= #ARGV do
  local a = {id = ARGV[at], idhash = ARGV[at + 1], label = ARGV[at + 2], start = ARGV[at + 3],
    expire_at = ARGV[at + 4], simhex = ARGV[at + 5], simdec = ARGV[at + 6], packed = ARGV[at + 7],
    meta = ARGV[at + 8], indexed = ARGV[at + 9] == '1', root = ARGV[at + 10], root_hash = ARGV[at + 11],
    hint = ARGV[at + 12], shape = ARGV[at + 14], empty = ARGV[at + 15], tokens = {}, list = {}}
  local S, nb = tonumber(ARGV[at + 13]), tonumber(ARGV[at + 16])
  for d = 1, 4 do a.tokens[d] = string.sub(a.packed, 2 * d - 1, 2 * d) end
  if a.indexed then a.tokens[5], a.list[5] = string.sub(a.packed, 9, 16), 1 end
  for s = 1, a.indexed and S or 0 do a.tokens[5 + s], a.list[5 + s] = string.sub(a.packed, 13 + 4 * s, 16 + 4 * s), 1 + s end
  out[#out + 1] = check(a, at + 17, nb) or store(a)
  at = at + 17 + 4 * math.max(nb, 0)
end
return out
