--[[
  Claim a node id for a starting gateway and register the gateway under a lease.
  KEYS[1] gateways   hash: node id -> "<lease end> <instance> <host> <kafka port> <native port> <admin port>"
  KEYS[2] seq        counter handing out node ids
  KEYS[3] addresses  hash: "<host>:<kafka port>" -> the node id last registered there
  ARGV[1] node       the node id asked for, -1 to have one chosen
  ARGV[2] instance   this process's random id
  ARGV[3] address    "<host> <kafka port> <native port> <admin port>" (a port 0 while not known)
  ARGV[4] ttl_ms     the lease's length
  Returns {0, node id}, or {13, holder's entry} when the node id asked for is leased by a live
  gateway at another address. Lease ends are in Redis's clock (TIME), so gateways' clocks never meet.
]]
local rcall = redis.call
--- @include "clock"
local now = redis_now_ms()
local instance, address = ARGV[2], ARGV[3]
local host, kport = string.match(address, '^(%S+) (%d+)')
local here = host .. ':' .. kport

-- Whether this gateway may take node id `id`: nobody leases it, the lease ran out, or the holder
-- is this gateway's previous run (the same advertised Kafka address); else false and the entry.
local function free(id)
  local entry = rcall('HGET', KEYS[1], id)
  if not entry then return true end
  local ends, inst, h, k = string.match(entry, '^(%d+) (%S+) (%S+) (%d+)')
  if tonumber(ends) < now or inst == instance then return true end
  return kport ~= '0' and h == host and k == kport, entry
end

local node = tonumber(ARGV[1])
if node >= 0 then
  local ok, entry = free(ARGV[1])
  if not ok then return {13, entry} end
else
  local known = kport ~= '0' and rcall('HGET', KEYS[3], here)
  if known and free(known) then
    node = tonumber(known)
  else
    repeat node = rcall('INCR', KEYS[2]) - 1 until free(string.format('%d', node))
  end
end
local id = string.format('%d', node)
rcall('HSET', KEYS[1], id, string.format('%d %s %s', now + tonumber(ARGV[4]), instance, address))
if kport ~= '0' then rcall('HSET', KEYS[3], here, id) end
return {0, node}
