--[[
  A block of producer ids never handed out before (InitProducerId, the native face's producers),
  from the counter both faces share: the gateway hands them out one by one (gateway/store/producer_ids.py).
  A script of its own so that it waits for the replicas as a durable state change
  (gateway/store/replication.py): an id answered from a primary that a failover then replaced was
  handed out again by the new one, to another producer, and two producers writing under one id and
  epoch met out-of-order sequences (soak sentinel:929668516, replayed).
  KEYS[1] ids      string, the last id reserved
  ARGV[1] count    how many ids the block holds
  Returns the block's last id.
]]
local rcall = redis.call
return rcall('INCRBY', KEYS[1], ARGV[1])
