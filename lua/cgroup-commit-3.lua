--[[
  Commit offsets for a KIP-848 consumer group whose committer the coordinator checked (member and
  epoch) against the group at `version`: written only if the group is still at that version and
  no other gateway coordinates it.
  KEYS[1] cmeta     the consumer group's hash: v (version), doc
  KEYS[2] offsets   "topic:partition" -> packed committed offset
  KEYS[3] owner     the group's coordinator lease "<node id> <host> <port>"
  ARGV[1] version   the group's version the coordinator checked
  ARGV[2] node      the committing gateway's node id
  ARGV[3] offsets   msgpack array: field, packed offset, field, packed offset, ...
  Returns 0 when written, 1 when the group's version moved on, 16 when another gateway coordinates it.
]]
local rcall = redis.call

local owner = rcall('GET', KEYS[3])
if owner and string.match(owner, '^(%S+)') ~= ARGV[2] then return 16 end
if tonumber(rcall('HGET', KEYS[1], 'v') or '0') ~= tonumber(ARGV[1]) then return 1 end
local offsets = cmsgpack.unpack(ARGV[3])
if #offsets > 0 then rcall('HSET', KEYS[2], unpack(offsets)) end
return 0
