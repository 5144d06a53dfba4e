-- lookup.lua: find an article by id in the live buckets.
-- KEYS[1] the bucket registry; ARGV[1] key prefix; ARGV[2] article id.
-- Returns {} or {label, bucket start ms, ids-value, fingerprint, meta, links}.
local P, id = ARGV[1], ARGV[2]
local labels = redis.call('ZRANGE', KEYS[1], 0, -1)
local label, _, v, slot, chunk = find_id(P, labels, id, redis.sha1hex(id))
if not label then return {} end
local start = redis.call('ZSCORE', KEYS[1], label)
local function at(family) return P .. family .. ':' .. label .. ':' .. chunk end
return {label, start, v,
  redis.call('HGET', at('f'), slot) or '',
  redis.call('HGET', at('m'), slot) or '',
  redis.call('HGET', at('d'), slot) or ''}
