--[[
  Count the deliveries of offsets a shared subscription with a delivery limit hands out, so that a
  record delivered again by the next gateway after a crash carries its count: each offset under
  the limit is counted once more; one delivered `limit` times already is not (it is to be archived).
  The counts of acknowledged offsets (below the cursor, or acked individually) are swept out when
  the hash has doubled since the last sweep, so a sweep costs O(1) per count kept.
  KEYS[1] sub      the subscription's hash (cursor; dsweep: the size that triggers the next sweep)
  KEYS[2] counts   hash of offset -> deliveries so far
  KEYS[3] acks     sorted set of offsets acked individually
  ARGV[1] limit    deliveries after which a record is archived
  ARGV[2] offsets  space-separated offsets being handed out
  Returns {0, n1, n2, ...}: per offset its count with this delivery, or minus its count when it is
  at the limit already; {15} for no subscription.
]]
local rcall = redis.call

local sub = rcall('HMGET', KEYS[1], 'cursor', 'dsweep')
local cursor = tonumber(sub[1])
if not cursor then return {15} end
local limit = tonumber(ARGV[1])
local out = {0}
for o in string.gmatch(ARGV[2], '%d+') do
  local seen = tonumber(rcall('HGET', KEYS[2], o) or '0')
  if seen >= limit then
    out[#out + 1] = -seen
  else
    out[#out + 1] = rcall('HINCRBY', KEYS[2], o, 1)
  end
end
if rcall('HLEN', KEYS[2]) > tonumber(sub[2] or '1024') then
  for _, field in ipairs(rcall('HKEYS', KEYS[2])) do
    if tonumber(field) < cursor or rcall('ZSCORE', KEYS[3], field) then rcall('HDEL', KEYS[2], field) end
  end
  rcall('HSET', KEYS[1], 'dsweep', string.format('%d', math.max(1024, 2 * rcall('HLEN', KEYS[2]))))
end
return out
