-- lookup.lua: find an article by id in the live buckets.
-- KEYS[1] the bucket registry; ARGV[1] key prefix; ARGV[2] article id.
-- Returns {} or {label, bucket start ms, ids-value, fingerprint, meta, links}.
local P, id = ARGV[1], ARGV[2]
local live = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #live, 2 do
  local label = live[i]
  local v = redis.call('HGET', P .. 'i:' .. label, id)
  if v then
    local h = tonumber(string.sub(v, 18))
    local chunk = math.floor(h / 100)
    return {label, live[i + 1], v,
      redis.call('HGET', P .. 'f:' .. label .. ':' .. chunk, h) or '',
      redis.call('HGET', P .. 'm:' .. label .. ':' .. chunk, h) or '',
      redis.call('HGET', P .. 'd:' .. label .. ':' .. chunk, h) or ''}
  end
end
return {}
