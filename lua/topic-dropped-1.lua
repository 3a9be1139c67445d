--[[
  Forget a deleted incarnation once every one of its partitions is dropped.
  KEYS[1] dropping  hash: "<incarnation>:<topic>" -> partitions to drop
  ARGV[1] field     "<incarnation>:<topic>"
  Returns 1 when it was listed, else 0.
]]
local rcall = redis.call

return rcall('HDEL', KEYS[1], ARGV[1])
