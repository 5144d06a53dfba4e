-- gather.lua: read what a check needs, except the block sets. Decides nothing
-- and computes no distance (docs/design.md). The worker sends this script and,
-- in the same pipeline right after it, the SMEMBERS of the block sets
-- (plain commands: Redis copies set members into Lua and back at ~0.5 µs each,
-- several times what a plain SMEMBERS costs). Reads need not be one atomic
-- snapshot: every key read only grows, commit.lua checks that each still has the
-- size read, and the counters, read here first, tell which buckets to check.
-- Key names come from the worker (it knows each bucket's shape), so the script
-- does no string arithmetic.
--
-- KEYS[1]  the bucket registry (ZSET label -> bucket start ms)
-- ARGV[1]  key prefix "simdedup:{NS}:"     ARGV[2] article id
-- ARGV[3]  lowest bucket start to probe (ms), ARGV[4] highest
-- ARGV[5]  (unused)
-- ARGV[6]  content hash as a signed decimal ("" for an empty fingerprint:
--          nothing is probed)
-- ARGV[7]  D, then D distinct 16-bit SimHash blocks (4 hex each)
-- then     S, then S sketch hashes in decimal (the s: fields)
-- then     K, then K times: label, its c: key, its S s: keys (buckets whose
--          shape the worker knows)
--
-- Returns {"replay", label, start, ids-value, fingerprint, meta} when the id is
-- already stored in any live bucket;
-- {"shape", label, bits, ...} when a bucket in range is not among the K (the
-- worker learns the shapes and gathers again); else {"snap", n, then n times
-- (every live bucket): label, start, counter, in range (0/1), content value,
--   {S signature values}, {handle, fingerprint, meta, ...: the articles listed
--   by the content and signature values}}
local P, id = ARGV[1], ARGV[2]
local lo, hi, cdec = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[6]
local D = tonumber(ARGV[7])
local S = tonumber(ARGV[8 + D])
local i = 9 + D + S
local names = {}
for _ = 1, tonumber(ARGV[i]) do
  names[ARGV[i + 1]] = i + 2
  i = i + 2 + S
end

local live = redis.call('ZRANGE', KEYS[1], '0', '-1', 'WITHSCORES')
-- Counter and shape of every live bucket; the shape also names the i: hash.
local nks = {}
for b = 1, #live, 2 do
  local label = live[b]
  local nk = redis.call('HMGET', P .. 'n:' .. label, 'n', 'k')
  nks[b] = nk
  if nk[2] then
    local v = redis.call('HGET', ids_key(P, label, tonumber(nk[2]), id), id)
    if v then
      local h = tonumber(string.sub(v, 18))
      local chunk = math.floor(h / 100)
      return {'replay', label, live[b + 1], v,
        redis.call('HGET', P .. 'f:' .. label .. ':' .. chunk, h) or '',
        redis.call('HGET', P .. 'm:' .. label .. ':' .. chunk, h) or ''}
    end
  end
end

local out = {'snap', #live / 2}
local unknown = {'shape'}
for b = 1, #live, 2 do
  local label, start = live[b], tonumber(live[b + 1])
  local nk = nks[b]
  local inrange = cdec ~= '' and nk[1] and nk[2] and start >= lo and start <= hi
  if inrange and not names[label] then
    unknown[#unknown + 1] = label
    unknown[#unknown + 1] = nk[2]
  end
  out[#out + 1] = label
  out[#out + 1] = live[b + 1]
  out[#out + 1] = nk[1] or ''
  out[#out + 1] = inrange and 1 or 0
  local svals, cands = {}, {}
  local cv = ''
  local at = names[label]
  if inrange and at then
    local seen = {}
    cv = redis.call('HGET', ARGV[at], cdec) or ''
    add_candidates(P, label, cv, cands, seen)
    for s = 1, S do
      local sv = redis.call('HGET', ARGV[at + s], ARGV[8 + D + s]) or ''
      add_candidates(P, label, sv, cands, seen)
      svals[s] = sv
    end
  end
  out[#out + 1] = cv
  out[#out + 1] = svals
  out[#out + 1] = cands
end
if #unknown > 1 then return unknown end
return out
