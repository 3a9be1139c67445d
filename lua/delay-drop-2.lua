--[[
  Drop the delayed messages a transaction held on a partition (at its abort); repeating is harmless.
  KEYS[1] pending  list of the transaction's msgpack item lists
  KEYS[2] txns     set of transactions with messages pending on this partition
  ARGV[1] txn      the transaction id
  Returns {0}.
]]
local rcall = redis.call
rcall('DEL', KEYS[1])
rcall('SREM', KEYS[2], ARGV[1])
return {0}
