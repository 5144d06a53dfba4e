-- lookup.lua: find an article by id in the live buckets.
-- KEYS[1] the bucket registry; ARGV[1] key prefix; ARGV[2] article id.
-- Returns nil (not stored) or {label, bucket start ms, ids-value, article
-- record, links}.
local P, id = ARGV[1], ARGV[2]
local labels = redis.call('ZRANGE', KEYS[1], 0, -1)
local label, _, v, h = find_id(P, labels, id, redis.sha1hex(id))
if not label then return false end
local start = redis.call('ZSCORE', KEYS[1], label)
local article = redis.call('LINDEX', article_key(P, label, h))
return {label, start, v, article or '', all_links(P, label, h)}
