-- resolve.lua: the articles behind SimHashes the worker found within
-- max_distance among the block set members gather.lua returned (few: only
-- near-duplicates get here). Reads only.
--
-- KEYS[1]  the bucket registry (declared for Cluster routing; not read)
-- ARGV[1]  key prefix, then groups: label, R, then R times: h: key, field
--
-- Returns, per field in order: {handles value, {handle, fingerprint, meta, ...}}
local P = ARGV[1]
local out = {}
local i = 2
while i <= #ARGV do
  local label, R = ARGV[i], tonumber(ARGV[i + 1])
  i = i + 2
  for _ = 1, R do
    local v = redis.call('HGET', ARGV[i], ARGV[i + 1]) or ''
    i = i + 2
    local cands = {}
    add_candidates(P, label, v, cands, {})
    out[#out + 1] = {v, cands}
  end
end
return out
