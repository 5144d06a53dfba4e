-- simdedup: take over the pending entries of a consumer that is no longer
-- alive, and remove it from the group once it holds none (docs/protocol.md,
-- "Recovery").
--
-- A worker is alive while its liveness key exists (it refreshes the key well
-- within its TTL). Checking the key, claiming and removing the consumer happen
-- in one script, so a consumer that comes back under the same name (it sets
-- its key before it reads) never loses an entry it has just read: either the
-- script sees the key and does nothing, or it ran before the worker's read.
--
-- KEYS[1] input stream   KEYS[2] the consumer's liveness key
-- ARGV[1] consumer group   ARGV[2] the consumer   ARGV[3] the claiming consumer
-- ARGV[4] entries to claim at most
-- Returns {state, entries}: state 0 = alive (nothing done), 1 = removed from
-- the group (held nothing), 2 = entries claimed (XCLAIM's reply: id and fields,
-- nil fields for an entry deleted from the stream meanwhile).

if redis.call('EXISTS', KEYS[2]) == 1 then
  return {0, {}}
end
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', ARGV[4], ARGV[2])
if #pending == 0 then
  redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
  return {1, {}}
end
local ids = {}
for i, row in ipairs(pending) do
  ids[i] = row[1]
end
return {2, redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, unpack(ids))}
