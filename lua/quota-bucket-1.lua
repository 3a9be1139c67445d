--[[
  Take controller mutations (partitions created or deleted) from one quota entity's token bucket,
  Kafka's TokenBucket (KIP-599): it refills at the quota's rate up to a burst of
  quota.window.num * quota.window.size.seconds * quota, and a strict take is refused while the
  bucket is below zero (StrictControllerMutationQuota checks before it records).
  KEYS[1] bucket   hash: tokens, at (ms of the last update)
  ARGV[1] now      milliseconds
  ARGV[2] permits  the partitions this mutation creates or deletes
  ARGV[3] rate     the quota: permits per second
  ARGV[4] burst    the most tokens the bucket holds
  ARGV[5] strict   1: refuse while below zero; 0: take anyway (permissive, older request versions)
  Returns {1 taken or 0 refused, the tokens left (a string)}.
]]
local rcall = redis.call
local now, permits, rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local held = rcall('HMGET', KEYS[1], 'tokens', 'at')
local tokens = burst
if held[1] then tokens = math.min(burst, tonumber(held[1]) + rate * (now - tonumber(held[2])) / 1000) end
local taken = 1
if ARGV[5] == '1' and tokens < 0 then
  taken = 0
else
  tokens = math.min(burst, tokens - permits)
end
rcall('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', now)
rcall('PEXPIRE', KEYS[1], math.ceil((burst - tokens) / rate * 1000) + 1000)
return {taken, tostring(tokens)}
