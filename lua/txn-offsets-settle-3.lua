--[[
  Settle a transaction's pending offset commits for one group: commit applies them, abort drops them.
  KEYS[1] pending  the transaction's pending offsets for the group: "topic:partition" -> offset record
  KEYS[2] offsets  the group's committed offsets
  KEYS[3] open     the group's transactions with offsets pending: a set of transaction ids
  ARGV[1] commit   1 to apply, 0 to drop
  ARGV[2] txn      the transaction's id
  Returns {0, offsets applied}; safe to repeat (a second run finds nothing pending).
]]
local rcall = redis.call
local applied = 0
if ARGV[1] == '1' then
  local pending = rcall('HGETALL', KEYS[1])
  if #pending > 0 then
    rcall('HSET', KEYS[2], unpack(pending))
    applied = #pending / 2
  end
end
rcall('DEL', KEYS[1])
rcall('SREM', KEYS[3], ARGV[2])
return {0, applied}
