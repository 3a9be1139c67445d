--[[
  Take, renew or give up a gateway's lease on dispatching a subscription: on the whole of it (a
  native subscription's dispatcher), or on some of its partitions (a share group's partitions, each
  dispatched by the gateway Metadata names its leader). The two kinds exclude each other.
  KEYS[1] owner       the subscription's owner string (a node id), with a TTL: the whole-lease
  KEYS[2] owners      hash: partition -> "<node> <lease end ms>", the partition leases
  ARGV[1] node        this gateway's node id
  ARGV[2] ttl_ms      the lease's length; 0 releases what this node holds of what is named
  ARGV[3] partitions  space-separated partitions, or "*" for the whole subscription
  Returns for "*": {0} when this node holds (or released) the lease, {14, holder} when another node
  holds it or any of its partitions. For partitions: {0, holder, ...}, one per partition named, ""
  where this node holds (or released) it, else the node id holding it (or the whole subscription).
]]
local rcall = redis.call
--- @include "clock"
local now = redis_now_ms()
local node, ttl = ARGV[1], tonumber(ARGV[2])

local function live(entry)
  local who, ends = string.match(entry, '^(%S+) (%d+)$')
  if who and tonumber(ends) >= now then return who end
  return nil
end

local whole = rcall('GET', KEYS[1])
if ARGV[3] == '*' then
  if whole and whole ~= node then return {14, whole} end
  if ttl == 0 then
    if whole then rcall('DEL', KEYS[1]) end
    return {0}
  end
  local all = rcall('HGETALL', KEYS[2])
  for i = 1, #all, 2 do
    local who = live(all[i + 1])
    if who and who ~= node then return {14, who} end
  end
  rcall('SET', KEYS[1], node, 'PX', ttl)
  return {0}
end

local out = {0}
for p in string.gmatch(ARGV[3], '%d+') do
  local cur = rcall('HGET', KEYS[2], p)
  local who = cur and live(cur)
  if whole and whole ~= node then
    out[#out + 1] = whole
  elseif who and who ~= node then
    out[#out + 1] = who
  else
    if ttl == 0 then
      if cur then rcall('HDEL', KEYS[2], p) end
    else
      rcall('HSET', KEYS[2], p, node .. ' ' .. (now + ttl))
    end
    out[#out + 1] = ''
  end
end
if ttl > 0 then rcall('PEXPIRE', KEYS[2], ttl * 3) end
return out
