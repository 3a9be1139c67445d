--[[
  Delete a KIP-848 consumer group while it has no members: with its committed offsets (DeleteGroups),
  or without them (a classic group takes the id over, as Kafka turns an empty consumer group into a
  classic one).
  KEYS[1] cmeta     the consumer group's hash: v (version), doc
  KEYS[2] cmembers  member id -> packed member
  KEYS[3] offsets   "topic:partition" -> packed committed offset
  KEYS[4] lag       the group's lag history (stream), deleted with the offsets
  ARGV[1] offsets   1 to delete the committed offsets (and the lag history) too, 0 to keep them
  Returns 0 when deleted, 69 when there is no such group, 68 when it has members.
]]
local rcall = redis.call

if rcall('EXISTS', KEYS[1]) == 0 then return 69 end
if rcall('HLEN', KEYS[2]) > 0 then return 68 end
rcall('DEL', KEYS[1], KEYS[2])
if ARGV[1] == '1' then rcall('DEL', KEYS[3], KEYS[4]) end
return 0
