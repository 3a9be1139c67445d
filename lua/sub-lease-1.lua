--[[
  Take or renew the lease under which one gateway dispatches a subscription, or give it up.
  KEYS[1] owner    the subscription's owner string (a node id), with a TTL
  ARGV[1] node     this gateway's node id
  ARGV[2] ttl_ms   the lease's length; 0 releases it if held by this node
  Returns {0} when this node holds (or released) the lease, {14, holder} when another node holds it.
]]
local rcall = redis.call

local holder = rcall('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return {14, holder} end
if tonumber(ARGV[2]) == 0 then
  if holder then rcall('DEL', KEYS[1]) end
  return {0}
end
rcall('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {0}
