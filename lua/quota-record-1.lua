--[[
  Record usage against one quota entity and return what its sampled rate needs: Kafka's Rate over
  quota.window.num samples of quota.window.size.seconds each (SampledStat), with the samples aligned
  to window boundaries so that every gateway adds to the same ones.
  KEYS[1] rate     hash: sample window start (ms) -> amount recorded in that window
  ARGV[1] now      milliseconds
  ARGV[2] amount   what this request adds (bytes, or request-time percent)
  ARGV[3] window   one sample's span, ms
  ARGV[4] samples  how many samples the rate spans
  Returns {total amount over the live samples (a string), the oldest live sample's start}.
]]
local rcall = redis.call
local now, window, samples = tonumber(ARGV[1]), tonumber(ARGV[3]), tonumber(ARGV[4])
local start = now - now % window
rcall('HINCRBYFLOAT', KEYS[1], start, ARGV[2])
local all = rcall('HGETALL', KEYS[1])
local total, oldest = 0, start
for i = 1, #all, 2 do
  local s = tonumber(all[i])
  if now - s >= samples * window then  -- SampledStat.purgeObsoleteSamples
    rcall('HDEL', KEYS[1], all[i])
  else
    total = total + tonumber(all[i + 1])
    if s < oldest then oldest = s end
  end
end
rcall('PEXPIRE', KEYS[1], samples * window)
return {tostring(total), oldest}
