--[[
  Renew a gateway's lease (or with ttl 0 give it up) and list the gateways whose lease runs.
  KEYS[1] gateways  hash: node id -> "<lease end> <instance> <host> <kafka port> <native port> <admin port>"
  ARGV[1] node      this gateway's node id
  ARGV[2] instance  this process's random id
  ARGV[3] address   "<host> <kafka port> <native port> <admin port>"
  ARGV[4] ttl_ms    the lease's length; 0 releases it
  Returns {0, now, node id, entry, node id, entry, ...} over every live gateway (lapsed leases are
  removed), or {13, holder's entry} when another live gateway holds this node id.
]]
local rcall = redis.call
--- @include "clock"
local now = redis_now_ms()
local cur = rcall('HGET', KEYS[1], ARGV[1])
if cur then
  local ends, inst = string.match(cur, '^(%d+) (%S+)')
  if inst ~= ARGV[2] and tonumber(ends) >= now then return {13, cur} end
end
if tonumber(ARGV[4]) > 0 then
  rcall('HSET', KEYS[1], ARGV[1], string.format('%d %s %s', now + tonumber(ARGV[4]), ARGV[2], ARGV[3]))
elseif cur then
  rcall('HDEL', KEYS[1], ARGV[1])
end
local out = {0, now}
local all = rcall('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if tonumber(string.match(all[i + 1], '^(%d+)')) < now then
    rcall('HDEL', KEYS[1], all[i])
  else
    out[#out + 1], out[#out + 2] = all[i], all[i + 1]
  end
end
return out
