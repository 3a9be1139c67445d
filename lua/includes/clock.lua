-- Redis's own clock in epoch milliseconds: leases and the times gateways compare meet on it, never
-- on a gateway's clock.
local function redis_now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
