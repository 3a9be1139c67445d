--[[
  Stage offsets a transaction commits for a group (TxnOffsetCommit), applied or dropped when it ends.
  KEYS[1] pending  the transaction's pending offsets for the group: "topic:partition" -> offset record
  KEYS[2] open     the group's transactions with offsets pending: a set of transaction ids
  ARGV[1] offsets  msgpack array: field, record, field, record, ...
  ARGV[2] txn      the transaction's id
  Returns {0, offsets staged}; safe to repeat (a field staged again is overwritten).
]]
local rcall = redis.call
local offsets = cmsgpack.unpack(ARGV[1])
if #offsets > 0 then
  rcall('HSET', KEYS[1], unpack(offsets))
  rcall('SADD', KEYS[2], ARGV[2])
end
return {0, #offsets / 2}
