#!lua
-- simdedup: acknowledge input entries and write their output entries, atomically
-- and at most once per input entry (see docs/protocol.md, "Exactly once").
--
-- The shebang line makes Redis (>= 7.0) check for OOM *before* the script runs,
-- so a script that starts always completes: there is no state where an entry was
-- acked but its output was not written.
--
-- KEYS[1] input stream   KEYS[2] output stream   KEYS[3] dead-letter stream
-- ARGV[1] consumer group
-- ARGV[2] output MAXLEN (~; 0 = no trimming)   ARGV[3] dead-letter MAXLEN (~; 0 = none)
-- ARGV[4] "1" to XDEL each acked input entry
-- ARGV[5] number of entries N, then per entry:
--   entry id, its receipt (key, index, element; key '' = none: the verdict
--   rests on no index write), n_out, n_out output field/value args, n_dead,
--   n_dead dead-letter args (n_dead = 0: no dead letter)
-- Returns one integer per entry: 1 = acked and emitted here, 0 = it was no
-- longer pending (another consumer, or an earlier attempt of this commit, already
-- acked it), so nothing was written, 2 = its receipt does not hold here
-- (below): left pending, nothing written, to be decided again.

local group = ARGV[1]
local out_maxlen = tonumber(ARGV[2])
local dead_maxlen = tonumber(ARGV[3])
local delete_processed = ARGV[4] == '1'
local n = tonumber(ARGV[5])

-- XADD one entry whose field/value pairs are ARGV[first .. first + count - 1],
-- passed straight from ARGV (no table built per entry: this script handles a
-- whole chunk of a batch, so per-entry work is what it costs). unpack takes
-- about 8000 values at most, and an error here would come after the XACK: the
-- worker bounds what an entry carries (MAX_DEAD_LETTER_FIELDS in output.rs).
local function xadd(key, maxlen, first, count)
  if maxlen > 0 then
    redis.call('XADD', key, 'MAXLEN', '~', maxlen, '*', unpack(ARGV, first, first + count - 1))
  else
    redis.call('XADD', key, '*', unpack(ARGV, first, first + count - 1))
  end
end

local results = {}
local i = 6
for e = 1, n do
  local id, receipt_key, receipt_index, receipt_element = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local n_out = tonumber(ARGV[i + 4])
  local out_first = i + 5
  local n_dead = tonumber(ARGV[out_first + n_out])
  local dead_first = out_first + n_out + 1
  i = dead_first + n_dead

  -- The index write this entry's verdict rests on must be here: the list
  -- element it stored holds that article, or is empty (deleted since). A
  -- server without it (a replica promoted before the write reached it) would
  -- answer with a verdict its index does not hold; the worker decides the
  -- entry again instead, unless it is no longer pending (acked by another
  -- consumer: the XACK below writes nothing; no group: XPENDING fails).
  local lost = false
  if receipt_key ~= '' then
    local element = redis.call('LINDEX', receipt_key, receipt_index)
    if element ~= receipt_element and element ~= '' then
      local pending = redis.pcall('XPENDING', KEYS[1], group, id, id, 1)
      lost = not pending.err and #pending > 0
    end
  end

  if lost then
    results[e] = 2
  -- The guard: XACK returns 1 only for the call that removes the entry from the
  -- group's pending list, which happens once per entry for the group's lifetime.
  elseif redis.call('XACK', KEYS[1], group, id) == 1 then
    xadd(KEYS[2], out_maxlen, out_first, n_out)
    if n_dead > 0 then
      xadd(KEYS[3], dead_maxlen, dead_first, n_dead)
    end
    if delete_processed then
      redis.call('XDEL', KEYS[1], id)
    end
    results[e] = 1
  else
    results[e] = 0
  end
end
return results
