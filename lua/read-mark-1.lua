--[[
  Mark a read on a Redis Cluster: one write, in the read partition's slot, so that the reading
  connection's replication offset moves to its node's and a WAIT after it counts the replicas that
  hold everything the node had when it read (gateway/store/replication.py, `Replication.read_mark`).
  PUBLISH, the mark behind Sentinel, goes over a Cluster's bus, not into its replication stream.
  The write goes to the replicas alone (redis.set_repl): it proves nothing once on disk, and with
  appendfsync always an AOF write would cost every read an fsync.
  KEYS[1] mark     string, the partition's read mark; it expires when reads stop
  ARGV[1] ttl      milliseconds the mark outlives the last read
  Returns 1.
]]
local rcall = redis.call
redis.set_repl(redis.REPL_REPLICA)
rcall('SET', KEYS[1], '1', 'PX', ARGV[1])
return 1
