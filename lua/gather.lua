-- gather.lua: read, in one atomic snapshot, everything a check needs. Decides
-- nothing: the worker computes distances in Rust (see docs/design.md) and then
-- calls commit.lua with the versions it read here.
--
-- All keys share the namespace's hash tag, so building names from the prefix
-- stays on one Redis Cluster slot.
--
-- KEYS[1]  the bucket registry (ZSET label -> bucket start ms)
-- ARGV[1]  key prefix "simdedup:{NS}:"
-- ARGV[2]  article id
-- ARGV[3]  lowest bucket start to probe (ms), ARGV[4] highest
-- ARGV[5..8] the four 16-bit SimHash blocks, 4 hex digits each
-- ARGV[9]  content hash, 16 hex ("" for an empty fingerprint: nothing is probed)
-- ARGV[10..] sentence hashes, 16 hex each
--
-- Returns {"replay", label, start, ids-value, fingerprint, meta} when the id is
-- already stored in any live bucket, else
-- {"snap", n, then n times: label, bucket start, counter, {members of block 0..3 as 4 arrays},
--  content-value, {sentence values}, {handle, fingerprint, handle, fingerprint, ...}}
local P, id = ARGV[1], ARGV[2]

local live = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #live, 2 do
  local label = live[i]
  local v = redis.call('HGET', P .. 'i:' .. label, id)
  if v then
    local h = tonumber(string.sub(v, 18))
    local chunk = math.floor(h / 100)
    return {'replay', label, live[i + 1], v,
      redis.call('HGET', P .. 'f:' .. label .. ':' .. chunk, h) or '',
      redis.call('HGET', P .. 'm:' .. label .. ':' .. chunk, h) or ''}
  end
end

local out = {'snap', 0}
if ARGV[9] == '' then return out end
local labels = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[3], ARGV[4], 'WITHSCORES')
out[2] = #labels / 2
for j = 1, #labels, 2 do
  local label = labels[j]
  local counter = redis.call('GET', P .. 'n:' .. label)
  local seen, cands = {}, {}
  local function add(h)
    if not seen[h] then
      seen[h] = true
      local fp = redis.call('HGET', P .. 'f:' .. label .. ':' .. math.floor(tonumber(h) / 100), h)
      -- A deleted article leaves its handle behind in the sets: skip it.
      if fp then
        cands[#cands + 1] = h
        cands[#cands + 1] = fp
      end
    end
  end
  out[#out + 1] = label
  out[#out + 1] = labels[j + 1]
  out[#out + 1] = counter or ''
  for pos = 0, 3 do
    local members = {}
    if counter then
      members = redis.call('SMEMBERS', P .. 'b:' .. label .. ':' .. pos .. ':' .. ARGV[5 + pos])
      for _, h in ipairs(members) do add(h) end
    end
    out[#out + 1] = members
  end
  local c = ARGV[9]
  local cv = counter and redis.call('HGET', P .. 'c:' .. label .. ':' .. string.sub(c, 1, 3), string.sub(c, 4)) or ''
  cv = cv or ''
  for h in string.gmatch(cv, '%d+') do add(h) end
  out[#out + 1] = cv
  local svals = {}
  for k = 10, #ARGV do
    local s = ARGV[k]
    local sv = counter and redis.call('HGET', P .. 's:' .. label .. ':' .. string.sub(s, 1, 4), string.sub(s, 5)) or ''
    sv = sv or ''
    for h in string.gmatch(sv, '%d+') do add(h) end
    svals[#svals + 1] = sv
  end
  out[#out + 1] = svals
  out[#out + 1] = cands
end
return out
