-- catch_up.lua: what a worker's view needs to catch up, in one call.
-- KEYS[1] the bucket registry; ARGV[1] key prefix; ARGV[2] the last
-- deletion-log entry the view applied ('' = none); ARGV[3] entries to read
-- at most; ARGV[4] a new history token, stored if the namespace has none;
-- ARGV[5] how long (ms) a new token lives before a bucket extends it.
-- Returns {{label, start, handle counter, shape bits}, ...} for the live
-- buckets, oldest first (counter and shape nil where the bucket's n: hash
-- has expired), {{entry id, label, handle}, ...} for the deletion-log
-- entries after ARGV[2], the history token and this server's replication
-- id. A view built under another token or replication id describes data
-- this server may not hold (a FLUSHDB, a restart without the data, a replica
-- promoted without the last writes): it is loaded again (view.rs, follow).
local P, after, count = ARGV[1], ARGV[2], ARGV[3]
local history = P .. 'history'
-- Written only when missing, so that a read-only user (simdedup inspect)
-- can catch up on a namespace a worker has written.
local token = redis.call('GET', history)
if not token then
  redis.call('SET', history, ARGV[4], 'PX', ARGV[5])
  token = ARGV[4]
end
local replid = string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)') or ''
local live = redis.call('ZRANGE', KEYS[1], '0', '-1', 'WITHSCORES')
local buckets = {}
for i = 1, #live, 2 do
  local nk = redis.call('HMGET', P .. 'n:' .. live[i], 'n', 'k')
  buckets[#buckets + 1] = {live[i], live[i + 1], nk[1], nk[2]}
end
-- delete.lua writes each entry's fields as b <label> h <handle>.
local deleted = {}
local from = after == '' and '-' or '(' .. after
for _, e in ipairs(redis.call('XRANGE', P .. 'deleted', from, '+', 'COUNT', count)) do
  deleted[#deleted + 1] = {e[1], e[2][2], e[2][4]}
end
return {buckets, deleted, token, replid}
