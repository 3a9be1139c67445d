--[[
  Take, renew or give up the lease under which one gateway runs a background role.
  KEYS[1] holder   string "<node id> <instance> <epoch>" of the holding gateway, with a TTL
  KEYS[2] epochs   counter: the last epoch handed out for the role
  ARGV[1] node     this gateway's node id
  ARGV[2] instance this gateway process's random id
  ARGV[3] epoch    the epoch this gateway holds the role with, -1 when it holds none
  ARGV[4] ttl_ms   the lease's length; 0 gives it up
  Returns {0, epoch} when this gateway holds the lease (renewed, or taken with a new, higher
  epoch), {0, -1} once given up, {13, holder} while another gateway holds it.
]]
local rcall = redis.call
local cur = rcall('GET', KEYS[1])
local mine = ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ARGV[3]
if ARGV[4] == '0' then
  if cur == mine then rcall('DEL', KEYS[1]) end
  return {0, -1}
end
if cur == mine then
  rcall('PEXPIRE', KEYS[1], ARGV[4])
  return {0, tonumber(ARGV[3])}
end
if cur then return {13, cur} end
local epoch = rcall('INCR', KEYS[2])
rcall('SET', KEYS[1], string.format('%s %s %d', ARGV[1], ARGV[2], epoch), 'PX', ARGV[4])
return {0, epoch}
