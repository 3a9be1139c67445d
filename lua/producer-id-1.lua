--[[
  A producer id never handed out before (InitProducerId, the native fence's new producers), from the
  counter both faces share. A script of its own so that it waits for the replicas as a durable state
  change (gateway/store/replication.py): an id answered from a primary that a failover then
  replaced was handed out again by the new one, to another producer, and two producers writing
  under one id and epoch met out-of-order sequences (soak sentinel:929668516, replayed).
  KEYS[1] ids      string, the last id handed out
  Returns the new id.
]]
local rcall = redis.call
return rcall('INCR', KEYS[1])
