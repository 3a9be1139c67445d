--[[
  Take or renew the lease under which one gateway coordinates a group, or give it up.
  KEYS[1] owner    the group's owner string "<node id> <host> <port>", with a TTL
  ARGV[1] node     this gateway's node id
  ARGV[2] address  "<host> <port>" where clients reach this gateway's Kafka listener
  ARGV[3] ttl_ms   the lease's length; 0 releases it if held by this node
  Returns {0} when this node holds (or released) the lease, {16, holder} when another node holds it.
]]
local rcall = redis.call

local holder = rcall('GET', KEYS[1])
if holder and string.match(holder, '^(%S+)') ~= ARGV[1] then return {16, holder} end
if tonumber(ARGV[3]) == 0 then
  if holder then rcall('DEL', KEYS[1]) end
  return {0}
end
rcall('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[2], 'PX', ARGV[3])
return {0}
