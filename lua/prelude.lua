-- prelude.lua: helpers shared by the index scripts. src/index/redis.rs puts
-- this text in front of each script that uses it when it loads the script, so
-- every script is still one EVALSHA.

-- The top `bits` (0-24) bits of a hash written in hex (at least 6 digits), as
-- ceil(bits / 4) hex digits, at least one: how the h:, c:, s: and i: hashes of
-- a bucket are split (src/keys.rs, top_bits_hex).
local function top(hex, bits)
  local v = 0
  if bits > 0 then v = math.floor(tonumber(string.sub(hex, 1, 6), 16) / 2 ^ (24 - bits)) end
  return string.format('%0' .. math.max(1, math.ceil(bits / 4)) .. 'x', v)
end

-- The low `bits` (0-24) bits of a 32-bit hash written in hex (8 digits), as
-- ceil(bits / 4) hex digits, at least one: how the s: hashes of a bucket are
-- split (src/keys.rs, low_bits_hex; the indexed sketch hashes are the smallest
-- of their sketch, so their top bits are skewed and their low bits are not).
local function low(hex, bits)
  local v = tonumber(hex, 16) % 2 ^ bits
  return string.format('%0' .. math.max(1, math.ceil(bits / 4)) .. 'x', v)
end

-- The i: hash of bucket `label` (shape `bits`) that holds article `id`: split
-- by the top bits of the SHA-1 of the id (src/keys.rs, Keys::ids).
local function ids_key(P, label, bits, id)
  return P .. 'i:' .. label .. ':' .. top(redis.sha1hex(id), bits)
end

-- Where article `id` is stored, among the live buckets `live` (ZRANGE
-- WITHSCORES of the registry): label, bucket start, its i: key, the i: value
-- (`<simhash hex>:<handle>`), handle and chunk; nil when it is not stored.
local function find_id(P, live, id)
  for b = 1, #live, 2 do
    local label = live[b]
    local k = redis.call('HGET', P .. 'n:' .. label, 'k')
    if k then
      local ikey = ids_key(P, label, tonumber(k), id)
      local v = redis.call('HGET', ikey, id)
      if v then
        local h = tonumber(string.sub(v, 18))
        return label, live[b + 1], ikey, v, h, math.floor(h / 100)
      end
    end
  end
  return nil
end

-- The candidates behind a list of handles `list` ("3 17 42") of bucket
-- `label`, appended to `cands` as handle, packed fingerprint, meta; `seen`
-- (handle -> true) skips handles already added. A deleted article leaves its
-- handle in the lists (a tombstone) but not in f:, so it is skipped.
local function add_candidates(P, label, list, cands, seen)
  for h in string.gmatch(list, '%d+') do
    if not seen[h] then
      seen[h] = true
      local chunk = string.sub(h, 1, -3)
      if chunk == '' then chunk = '0' end
      local fp = redis.call('HGET', P .. 'f:' .. label .. ':' .. chunk, h)
      if fp then
        cands[#cands + 1] = h
        cands[#cands + 1] = fp
        cands[#cands + 1] = redis.call('HGET', P .. 'm:' .. label .. ':' .. chunk, h) or ''
      end
    end
  end
end

-- HSET `field` = `value` in hash `key`, giving the key its expiry when this
-- call creates it. Every i:, h:, c:, s: hash carries an empty field "" (ids
-- are never empty, the others are numbers), written along with each field:
-- HSET answers 2 (two new fields) only when the hash did not exist, so the
-- EXPIREAT is sent once per key instead of once per write.
local function set_field(key, field, value, expire_at)
  if redis.call('HSET', key, field, value, '', '') == 2 then
    redis.call('EXPIREAT', key, expire_at)
  end
end

-- The block set of bucket `label` (shape `bits`) for block number `d` (1-4)
-- with value `hex` (4 hex digits): shared by the four block positions in small
-- buckets, one per position from 16 shape bits (about 1.5 M articles) up, where
-- the extra keys cost little and a check reads 4x fewer members (src/keys.rs,
-- Keys::block).
local function block_key(P, label, bits, d, hex)
  if bits >= 16 then return P .. 'b:' .. label .. ':' .. (d - 1) .. ':' .. hex end
  return P .. 'b:' .. label .. ':' .. hex
end
