--[[
  Delete some committed offsets of a group (Kafka's OffsetDelete), if the group is still as the
  coordinator saw it when it checked which partitions may go.
  KEYS[1] meta     the group's meta hash: v, state, gen, doc
  KEYS[2] offsets  "topic:partition" -> packed committed offset
  ARGV[1] version  the group's version the coordinator checked
  ARGV[2] fields   msgpack array of "topic:partition" to delete
  Returns 0 when deleted, 1 when the group's version moved on (nothing deleted).
]]
local rcall = redis.call

if tonumber(rcall('HGET', KEYS[1], 'v') or '0') ~= tonumber(ARGV[1]) then return 1 end
local fields = cmsgpack.unpack(ARGV[2])
if #fields > 0 then rcall('HDEL', KEYS[2], unpack(fields)) end
return 0
