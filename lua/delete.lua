-- delete.lua: remove an article by id. Its SimHash stays in the block sets
-- (a set member may be shared; it expires with its bucket), its a: element
-- is emptied, its recent record marked deleted, and the deletion log tells
-- every worker's view.
-- KEYS[1] the bucket registry; ARGV[1] key prefix; ARGV[2] article id.
-- Returns {label, handle} of the article removed, or nil if it was not there.
local P, id = ARGV[1], ARGV[2]
local labels = redis.call('ZRANGE', KEYS[1], 0, -1)
local label, ikey, _, h = find_id(P, labels, id, redis.sha1hex(id))
if not label then return false end
local start = redis.call('ZSCORE', KEYS[1], label)
redis.call('HDEL', ikey, id)
-- Every worker's view (src/index/redis_index/view.rs) holds every live article:
-- tell them by an entry in the deletion log (a stream: a view reads what came
-- after the last entry it applied). Entries older than the
-- retention concern expired buckets only: trimmed; the key expires with the
-- newest bucket a deletion touched.
local rn = redis.call('HMGET', P .. 'n:' .. label, 'r', 'n')
local retain = tonumber(rn[1] or '0')
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local log = P .. 'deleted'
redis.call('XADD', log, 'MINID', '~', string.format('%d', now_ms - retain), '*',
  'b', label, 'h', string.format('%d', h))
local expire_at = string.format('%d', math.ceil((tonumber(start) + retain) / 1000))
if redis.call('TTL', log) < 0 then
  redis.call('EXPIREAT', log, expire_at)
else
  redis.call('EXPIREAT', log, expire_at, 'GT')
end
-- Its a: element is emptied, not removed: the elements after it keep their
-- indexes. Readers take an empty element for a deleted article.
local akey, index = article_key(P, label, h)
redis.call('LSET', akey, index, '')
-- Its recent record, if still among the newest, says deleted (first byte 0);
-- a string that is not there is not created.
local rkey, at = recent_slot(P, label, h)
if tonumber(rn[2] or '0') - h < RECENT_SLOTS and redis.call('STRLEN', rkey) > at then
  redis.call('SETRANGE', rkey, at, string.char(RECENT_DELETED))
end
-- The d: hash keeps its empty field "" (set_field in prelude.lua), and with it
-- its expiry, when its last link goes.
redis.call('HDEL', links_key(P, label, h))
redis.call('DEL', more_links_key(P, label, h))
return {label, h}
