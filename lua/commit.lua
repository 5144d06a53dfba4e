-- commit.lua: record an article and its verdict, but only if nothing inserted
-- since the worker's view of the window could have changed its decision.
-- Arguments: src/index/redis_index/commit.rs (CommitArgs::argv, pinned by a test).
-- Every insert takes the next handle of its bucket (n: field n) and writes
-- its recent record (codec.rs, encode_recent) in the bucket's r: string, so
-- what a bucket received since the view (the handles after the view's
-- counter) is read back with one GETRANGE: a record shows whether its article
-- meets this one (src/index/meet.rs).
-- Returns {"ok", handle} | {"retry", reason} | {"replay"} | {"expired"} |
-- {"layout", label} (a bucket written with another key layout) |
-- {"root_gone"} (the root the verdict names is no longer stored)

local P, id, idhash, label = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local start, retention, expire_at = ARGV[5], ARGV[6], ARGV[7]
local simhex, article = ARGV[8], ARGV[9]
local indexed, root, root_hash = ARGV[10] == '1', ARGV[11], ARGV[12]
local default_shape, S, empty, record = ARGV[13], tonumber(ARGV[14]), ARGV[15], ARGV[16]
local token = ARGV[17]
local FIRST_BUCKET = 18
local packed = article_packed(article)
-- The keys, as bytes at their offsets in a record (RECENT_* in src/keys.rs):
-- the id hash, the four blocks (key t at RECENT_SIMHASH_AT + 2 (t - 2): a
-- block meets only at its own position), the content hash, then the S lookup
-- sketch hashes (key 6 + s is list s + 1 among the full-list flags); built
-- at once.
local sub = string.sub
local tokens = {sub(record, RECENT_ID_AT + 1, RECENT_SIMHASH_AT), sub(packed, 1, 2), sub(packed, 3, 4),
  sub(packed, 5, 6), sub(packed, 7, 8), sub(packed, 9, PACKED_SKETCH_AT)}
for s = 1, S do tokens[6 + s] = sub(packed, PACKED_SKETCH_AT + 4 * s - 3, PACKED_SKETCH_AT + 4 * s) end
local last = indexed and 6 + S or 5
-- Which key (t0..t1 of tokens) a record in `parts` (prelude.lua,
-- recent_records) has: 'id', a key's kind, or nil. A hit counts only at
-- its key's offset in a record of an article (head byte: 1 + its sketch's
-- length, RECENT_UNBOUNDED, or RECENT_DELETED), within the sketch for a
-- sketch hash. A list full in the view (its flag FLAG_SET in `full`) is
-- never appended to: meeting only through it is no conflict. One
-- string.find per key over all records.
local function conflict(parts, full, t0, t1)
  for p = 1, #parts do
    local recs, stride = parts[p][1], parts[p][2]
    for t = t0, t1 do
      local pos = not (t >= 6 and string.byte(full, t - 5) == FLAG_SET) and string.find(recs, tokens[t], 1, true)
      while pos do
        local off = (pos - 1) % stride
        local head = string.byte(recs, pos - off)
        local n = head - 1
        if head ~= RECENT_DELETED and ((t == 1 and off == RECENT_ID_AT)
          or (t > 1 and t <= 5 and off == RECENT_SIMHASH_AT + 2 * (t - 2))
          or (t == 6 and off == RECENT_CONTENT_AT)
          or (t > 6 and off >= RECENT_SKETCH_AT and (off - RECENT_SKETCH_AT) % 4 == 0
            and (head == RECENT_UNBOUNDED or off < RECENT_SKETCH_AT + 4 * n))) then
          return t == 1 and 'id' or (t <= 5 and 'block' or (t == 6 and 'content' or 'signature'))
        end
        pos = string.find(recs, tokens[t], pos + 1, true)
      end
    end
  end
end
-- Validation: the live buckets are the view's, none holds this id, and each
-- one that received inserts since holds no article that meets this one.
-- Per bucket: label, the view's counter, in range, full lists, may hold id.
local live = redis.call('ZRANGE', KEYS[1], '0', '-1')
local own_counter, shapes = nil, {} -- the own bucket's n: as read here; shapes
if ARGV[FIRST_BUCKET] == '-1' then
  -- Bulk preload (RedisIndex::preload, benchmarks only): nothing to validate.
  if find_id(P, live, id, idhash) then return {'replay'} end
else
  -- The view describes this history (catch_up.lua): not a flushed namespace,
  -- nor one the worker has not read since it was written anew.
  if redis.call('GET', P .. 'history') ~= token then return {'retry', 'history'} end
  if #live ~= (#ARGV - FIRST_BUCKET + 1) / 5 then return {'retry', 'buckets'} end
  for b = 1, #live do
    local i = FIRST_BUCKET + 5 * (b - 1)
    local l, counter, inrange, full, may_hold_id = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
    if live[b] ~= l then return {'retry', 'buckets'} end
    local nk = redis.call('HMGET', P .. 'n:' .. l, 'n', 'k', 'l')
    if l == label then own_counter = nk end
    shapes[l] = nk[2]
    if nk[2] and nk[3] ~= LAYOUT then return {'layout', l} end
    if not nk[1] and counter ~= '' then return {'retry', 'buckets'} end -- expired since
    local from, to = (tonumber(counter) or 0) + 1, tonumber(nk[1] or '0')
    -- The view holds handles this server lost (a replica promoted without
    -- them): they will be handed out again, to articles the view lacks.
    if from > to + 1 then return {'retry', 'rollback'} end
    local recs = inrange == '1' and from <= to and to - from < RECENT_SLOTS and recent_records(P, l, from, to)
    -- Stored already (where the view may hold the id, or among the inserts
    -- since, unless none of their records has its hash): a replay.
    if nk[2] and (may_hold_id == '1' or (from <= to and (not recs or conflict(recs, full, 1, 1))))
      and redis.call('HEXISTS', ids_key(P, l, tonumber(nk[2]), idhash), id) == 1 then return {'replay'} end
    if inrange == '1' then
      -- Far behind (a stalled worker): catching up is cheaper.
      if to - from >= RECENT_SLOTS then return {'retry', 'behind'} end
      local why = recs and conflict(recs, full, 2, last)
      if why then return {'retry', why} end
    end
  end
end
-- A duplicate names its cluster's root, which must still be stored: a
-- verdict never names a deleted article (nor one whose bucket expired). The
-- worker decides again without it.
local l, rh
if root ~= '' then
  local _
  l, _, _, rh = find_id(P, live, root, root_hash, shapes)
  if not l then return {'root_gone'} end
end
local function now_ms() local t = redis.call('TIME'); return t[1] * 1000 + math.floor(t[2] / 1000) end
-- Past its retention (an old article): decided, stored nowhere. A bucket
-- found above has not expired: its keys expire at the retention's end.
if not (own_counter and own_counter[2]) and tonumber(start) + tonumber(retention) <= now_ms() then return {'expired'} end
-- The new handle: one past the counter validation read, or HINCRBY; the
-- bucket's shape bits, as validation read them, or as a new bucket gets them.
local k = own_counter and tonumber(own_counter[2])
local nkey = P .. 'n:' .. label
local hn = own_counter and (tonumber(own_counter[1]) or 0) + 1 or redis.call('HINCRBY', nkey, 'n', '1')
local h = string.format('%d', hn)
if own_counter then redis.call('HSET', nkey, 'n', h) end
local fresh = hn == 1
if fresh then
  -- A new bucket, shaped by the newest older one's size (at most one bit smaller:
  -- it may still be filling), or the configured guess. Labels sort as times.
  k = nil
  for b = #live, 1, -1 do
    if live[b] < label then
      local nk = redis.call('HMGET', P .. 'n:' .. live[b], 'n', 'k')
      local articles, older = tonumber(nk[1] or ''), tonumber(nk[2] or '')
      if articles then
        k = 0
        while k < MAX_SHAPE_BITS and articles > ARTICLES_PER_KEY * 2 ^ k do k = k + 1 end
        if older and k < older - 1 then k = older - 1 end
      end
      break
    end
  end
  k = k or tonumber(default_shape)
  -- r: retention, checked by every worker that connects; l: this layout.
  redis.call('HSET', nkey, 'k', string.format('%d', k), 'r', retention, 'l', LAYOUT)
  redis.call('EXPIREAT', nkey, expire_at)
  redis.call('ZADD', KEYS[1], start, label)
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('(%d', now_ms() - tonumber(retention)))
  redis.call('EXPIREAT', KEYS[1], expire_at, redis.call('TTL', KEYS[1]) < 0 and 'NX' or 'GT')
  -- The history token lives as long as the buckets it describes.
  redis.call('EXPIREAT', P .. 'history', expire_at, 'GT')
end
k = k or tonumber(redis.call('HGET', nkey, 'k'))
set_field(ids_key(P, label, k, idhash), id, simhex .. ':' .. h, expire_at)
-- Handle hn is element hn % 100 of the a: list of chunk hn / 100: handles
-- are taken one by one here, so it is the next element (chunk 0 starts with
-- an empty one, for handle 0).
local akey, index = article_key(P, label, hn)
if fresh then redis.call('RPUSH', akey, '') end
redis.call('RPUSH', akey, article)
if fresh or index == 0 then redis.call('EXPIREAT', akey, expire_at) end
local rkey, at = recent_slot(P, label, hn)
redis.call('SETRANGE', rkey, at, record)
if fresh then redis.call('EXPIREAT', rkey, expire_at) end
for d = 1, indexed and 4 or 0 do
  local bkey = block_key(P, label, k, d, string.sub(simhex, 4 * d - 3, 4 * d))
  redis.call('SADD', bkey, h)
  -- A set the view saw empty (or in a bucket it does not know) may be new.
  if fresh or empty == '' or string.byte(empty, d) == FLAG_SET then redis.call('EXPIREAT', bkey, expire_at) end
end
-- Link a duplicate to its cluster's root, in the root's bucket: in the
-- root's field of its d: hash while it fits in LINKS_INLINE_BYTES, else
-- appended to the root's own string (more_links_key), so that a link costs
-- the same however often the story was copied before. A key this creates
-- gets the root bucket's expiry.
if l then
  local key, field = links_key(P, l, rh)
  local link = label .. ':' .. h
  local inline = redis.call('HGET', key, field)
  local created
  if not inline or #inline + 1 + #link <= LINKS_INLINE_BYTES then
    created = redis.call('HSET', key, field, inline and (inline .. ' ' .. link) or link, '', '') == 2
  else
    key = more_links_key(P, l, rh)
    created = redis.call('APPEND', key, ' ' .. link) == #link + 1
  end
  if created then
    local lstart = redis.call('ZSCORE', KEYS[1], l)
    redis.call('EXPIREAT', key, string.format('%d', math.ceil((tonumber(lstart) + tonumber(retention)) / 1000)))
  end
end
return {'ok', h}
