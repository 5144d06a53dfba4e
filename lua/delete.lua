-- delete.lua: remove an article by id. Its handle stays in the block sets and
-- signature fields as a tombstone (reads skip it; it expires with its bucket):
-- those only ever grow, which is what lets commit.lua compare sizes.
-- KEYS[1] the bucket registry; ARGV[1] key prefix; ARGV[2] article id.
-- Returns 1 if the article was there, else 0.
local P, id = ARGV[1], ARGV[2]
local live = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local label, _, ikey, _, slot, chunk = find_id(P, live, id)
if not label then return 0 end
redis.call('HDEL', ikey, id)
for _, family in ipairs({'f', 'm', 'd'}) do
  redis.call('HDEL', P .. family .. ':' .. label .. ':' .. chunk, slot)
end
return 1
