-- delete.lua: remove an article by id. Its handle stays in the block sets and
-- signature fields as a tombstone (reads skip it; it expires with its bucket):
-- those only ever grow, which is what lets commit.lua compare sizes.
-- KEYS[1] the bucket registry; ARGV[1] key prefix; ARGV[2] article id.
-- Returns 1 if the article was there, else 0.
local P, id = ARGV[1], ARGV[2]
for _, label in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local ikey = P .. 'i:' .. label
  local v = redis.call('HGET', ikey, id)
  if v then
    local h = tonumber(string.sub(v, 18))
    local chunk = math.floor(h / 100)
    redis.call('HDEL', ikey, id)
    redis.call('HDEL', P .. 'f:' .. label .. ':' .. chunk, h)
    redis.call('HDEL', P .. 'm:' .. label .. ':' .. chunk, h)
    redis.call('HDEL', P .. 'd:' .. label .. ':' .. chunk, h)
    return 1
  end
end
return 0
