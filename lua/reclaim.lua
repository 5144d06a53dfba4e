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
-- Returns {state, entries, deleted}: state 0 = alive (nothing done), 1 =
-- removed from the group (held nothing), 2 = entries taken over: `entries` as
-- XCLAIM replies them (id and fields), `deleted` the ids of pending entries no
-- longer in the stream (XDEL, trimming). Those are not claimed: XCLAIM would
-- drop them from the pending list without a word, and every input entry gets
-- an output; they stay pending until the claiming worker commits a rejection
-- (`entry_deleted`) for them, which acks them.

if redis.call('EXISTS', KEYS[2]) == 1 then
  return {0, {}, {}}
end
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', ARGV[4], ARGV[2])
if #pending == 0 then
  redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
  return {1, {}, {}}
end
local ids, deleted = {}, {}
for _, row in ipairs(pending) do
  local id = row[1]
  if #redis.call('XRANGE', KEYS[1], id, id) == 1 then
    ids[#ids + 1] = id
  else
    deleted[#deleted + 1] = id
  end
end
local claimed = {}
if #ids > 0 then
  claimed = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, unpack(ids))
end
return {2, claimed, deleted}
