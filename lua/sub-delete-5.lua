--[[
  Delete a subscription on one partition: its position, its acks, its pending transactional acks,
  its records' delivery counts, its name in the partition's set.
  KEYS[1] sub      the subscription's hash (cursor, mode, created)
  KEYS[2] acks     sorted set of offsets acked individually
  KEYS[3] subs     set of subscription names on the partition
  KEYS[4] pending  offsets locked by transactions
  KEYS[5] deliveries  hash of offset -> times delivered (see sub-deliver-3)
  ARGV[1] name     the subscription's name
  Returns {0}.
]]
local rcall = redis.call

rcall('DEL', KEYS[1], KEYS[2], KEYS[4], KEYS[5])
rcall('SREM', KEYS[3], ARGV[1])
return {0}
