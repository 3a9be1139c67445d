--[[
  Hold delayed messages under a transaction on a partition until it commits (delay-commit-8) or aborts.
  KEYS[1] pending  list of the transaction's msgpack item lists, in produce order
  KEYS[2] txns     set of transactions with messages pending on this partition
  ARGV[1] txn      the transaction id
  ARGV[2] items    msgpack list of {deliver at, batch, record count, max timestamp}
  Returns {0}.
]]
local rcall = redis.call
rcall('RPUSH', KEYS[1], ARGV[2])
rcall('SADD', KEYS[2], ARGV[1])
return {0}
