--[[
  Count the deliveries of offsets a shared subscription with a delivery limit hands out, so that a
  record delivered again by the next gateway after a crash carries its count: each offset under
  the limit is counted once more; one delivered `limit` times already is not (it is to be archived).
  Counts below the cursor (acknowledged) are dropped once the hash grows.
  KEYS[1] sub      the subscription's hash (cursor)
  KEYS[2] counts   hash of offset -> deliveries so far
  ARGV[1] limit    deliveries after which a record is archived
  ARGV[2] offsets  space-separated offsets being handed out
  Returns {0, n1, n2, ...}: per offset its count with this delivery, or minus its count when it is
  at the limit already; {15} for no subscription.
]]
local rcall = redis.call

local cursor = tonumber(rcall('HGET', KEYS[1], 'cursor'))
if not cursor then return {15} end
local limit = tonumber(ARGV[1])
local out = {0}
local n = 0
for o in string.gmatch(ARGV[2], '%d+') do
  n = n + 1
  local seen = tonumber(rcall('HGET', KEYS[2], o) or '0')
  if seen >= limit then
    out[#out + 1] = -seen
  else
    out[#out + 1] = rcall('HINCRBY', KEYS[2], o, 1)
  end
end
if rcall('HLEN', KEYS[2]) > 2 * n + 1024 then
  for _, field in ipairs(rcall('HKEYS', KEYS[2])) do
    if tonumber(field) < cursor then rcall('HDEL', KEYS[2], field) end
  end
end
return out
