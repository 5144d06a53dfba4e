-- prelude.lua: helpers shared by the index scripts. src/index/redis_index.rs puts
-- this text in front of each script when it loads the script, so every
-- script is still one EVALSHA; in front of it, the constants the scripts
-- share with Rust, written from Rust (lua_constants in src/keys.rs).

-- printf formats of the hex key parts below, by digit count: a format built
-- with `..` from a number would go through Lua's number-to-string conversion
-- (sprintf "%.14g") on every call.
local HEX_DIGITS = {'%01x', '%02x', '%03x', '%04x', '%05x', '%06x'}

-- The top `bits` (0-24) bits of a hash written in hex (at least 6 digits), as
-- ceil(bits / 4) hex digits, at least one: how the i: hashes of a bucket are
-- split (src/keys.rs, top_bits_hex).
local function top(hex, bits)
  if bits == 0 then return '0' end
  local v = math.floor(tonumber(string.sub(hex, 1, 6), 16) / 2 ^ (24 - bits))
  return string.format(HEX_DIGITS[math.floor((bits + 3) / 4)], v)
end

-- The i: hash of bucket `label` (shape `bits`) that holds the article whose
-- id hashes to `idhash`: the SHA-1 of the id in hex, or its first 6 digits at
-- least (the worker sends those: redis.sha1hex costs a commit more than the
-- argument does). Split by its top bits (src/keys.rs, Keys::ids).
local function ids_key(P, label, bits, idhash)
  return P .. 'i:' .. label .. ':' .. top(idhash, bits)
end

-- The a: list of bucket `label` holding handle `h`, and the handle's index in
-- it: chunk h / 100, index h % 100 (src/keys.rs, Keys::articles).
local function article_key(P, label, h)
  return P .. 'a:' .. label .. ':' .. string.format('%d', math.floor(h / HANDLES_PER_CHUNK)), h % HANDLES_PER_CHUNK
end

-- The d: hash of bucket `label` holding handle `h`'s links, and its field:
-- chunk h / 100, field h % 100 (src/keys.rs, Keys::links).
local function links_key(P, label, h)
  return P .. 'd:' .. label .. ':' .. string.format('%d', math.floor(h / HANDLES_PER_CHUNK)),
    string.format('%d', h % HANDLES_PER_CHUNK)
end

-- The string of handle `h`'s links beyond the first LINKS_INLINE_BYTES of
-- them (its d: field): `d:<label>:<chunk>:<field>` (src/keys.rs,
-- Keys::more_links).
local function more_links_key(P, label, h)
  local dkey, field = links_key(P, label, h)
  return dkey .. ':' .. field
end

-- All of handle `h`'s links: its d: field, then its own string.
local function all_links(P, label, h)
  local dkey, field = links_key(P, label, h)
  local inline = redis.call('HGET', dkey, field)
  local more = inline and redis.call('GET', more_links_key(P, label, h))
  return (inline or '') .. (more or '')
end

-- The packed fingerprint of an a: list element: the bytes after its 2-byte
-- length (little-endian), as many as it says (codec.rs, encode_article).
local function article_packed(a)
  return string.sub(a, 3, 2 + string.byte(a, 1) + 256 * string.byte(a, 2))
end

-- Where article `id` (SHA-1 `idhash`, as for ids_key) is stored among the live
-- buckets `labels` (ZRANGE of the registry, oldest first; looked through newest
-- first, where a duplicate's root usually is): label, its i: key, the i:
-- value (`<simhash hex>:<handle>`) and its handle (article_key and links_key
-- say where its a: element and d: entry are); nil when it is not stored.
-- `shapes` (optional): label -> shape bits already read.
local function find_id(P, labels, id, idhash, shapes)
  for b = #labels, 1, -1 do
    local label = labels[b]
    local k = shapes and shapes[label] or redis.call('HGET', P .. 'n:' .. label, 'k')
    if k then
      local ikey = ids_key(P, label, tonumber(k), idhash)
      local v = redis.call('HGET', ikey, id)
      if v then
        return label, ikey, v, tonumber(string.sub(v, 18))
      end
    end
  end
  return nil
end

-- HSET `field` = `value` in hash `key`, giving the key its expiry when this
-- call creates it. Every i: and d: hash carries an empty field "" (ids are
-- never empty, handles are numbers), written along with each field:
-- HSET answers 2 (two new fields) only when the hash did not exist, so the
-- EXPIREAT is sent once per key instead of once per write.
local function set_field(key, field, value, expire_at)
  if redis.call('HSET', key, field, value, '', '') == 2 then
    redis.call('EXPIREAT', key, expire_at)
  end
end

-- The block set of bucket `label` (shape `bits`) for block number `d` (1-4)
-- with value `hex` (4 hex digits): shared by the four block positions in small
-- buckets, one per position from POSITIONAL_BLOCK_BITS shape bits (over 2 M
-- articles) up, where
-- the extra keys cost little and a check reads 4x fewer members (src/keys.rs,
-- Keys::block).
local function block_key(P, label, bits, d, hex)
  if bits >= POSITIONAL_BLOCK_BITS then return P .. 'b:' .. label .. ':' .. (d - 1) .. ':' .. hex end
  return P .. 'b:' .. label .. ':' .. hex
end

-- Where the recent record of handle `h` of bucket `label` lives: the
-- bucket's r: string and the offset of its slot. The string holds the
-- records of the newest RECENT_SLOTS handles, RECENT_STRIDE bytes each,
-- handle h in slot h % RECENT_SLOTS (src/index/redis_index/codec.rs,
-- encode_recent: 1 + sketch length or 255 where the sketch did not fit, 0
-- for a deleted article; the id hash; the packed fingerprint's SimHash,
-- content hash and sketch).
local function recent_slot(P, label, h)
  return P .. 'r:' .. label, (h % RECENT_SLOTS) * RECENT_STRIDE
end

-- The records of handles from..to of bucket `l` (fewer than RECENT_SLOTS
-- apart) as {records end to end, bytes per record} parts: one GETRANGE (two
-- where the slots wrap), then, for each record whose sketch did not fit
-- (first byte 255), the record rebuilt whole from the packed fingerprint
-- (its a: element) on its own.
local function recent_records(P, l, from, to)
  local key, a = recent_slot(P, l, from)
  local _, b = recent_slot(P, l, to)
  local recs = redis.call('GETRANGE', key, a, (a <= b and b or RECENT_SLOTS * RECENT_STRIDE) + RECENT_STRIDE - 1)
  if a > b then recs = recs .. redis.call('GETRANGE', key, 0, b + RECENT_STRIDE - 1) end
  local unbounded = string.char(RECENT_UNBOUNDED)
  local parts, pos = {{recs, RECENT_STRIDE}}, string.find(recs, unbounded, 1, true)
  while pos do
    local h = from + (pos - 1) / RECENT_STRIDE
    local fp = h % 1 == 0 and redis.call('LINDEX', article_key(P, l, h))
    if fp and fp ~= '' then
      fp = article_packed(fp)
      -- Its head and id hash, then the packed fingerprint's SimHash, content
      -- hash and whole sketch, which a record holds the start of.
      local n = string.byte(fp, #fp + 1 - PACKED_SKETCH_COUNT_AT)
      fp = unbounded .. string.sub(recs, pos + RECENT_ID_AT, pos + RECENT_SIMHASH_AT - 1)
        .. string.sub(fp, 1, PACKED_SKETCH_AT + 4 * n)
      parts[#parts + 1] = {fp, #fp}
    end
    pos = string.find(recs, unbounded, pos + 1, true)
  end
  return parts
end
