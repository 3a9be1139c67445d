--[[
  Turn a group of one protocol into the other (online upgrade to the consumer protocol, downgrade
  to the classic one) in one step: the new group is written and the old one removed, if the old one
  is still at the version that was read and no other gateway holds the lease. Committed offsets,
  shared by both protocols, stay.
  KEYS[1] cmeta      the consumer group's hash: v (version), doc
  KEYS[2] cmembers   the consumer group's members: member id -> packed member
  KEYS[3] owner      the group's coordinator lease "<node id> <host> <port>"
  KEYS[4] meta       the classic group's meta hash: v, state, gen, doc
  KEYS[5] members    the classic group's members: member id -> packed member
  KEYS[6] instances  the classic group's static members: instance id -> member id
  ARGV[1] to         "consumer" (upgrade) or "classic" (downgrade)
  ARGV[2] node       the converting gateway's node id
  ARGV[3] version    the version of the group being replaced, as it was read
  ARGV[4] state      to classic: the classic state name (unused to consumer)
  ARGV[5] generation to classic: the generation id (unused to consumer)
  ARGV[6] doc        the new group's packed fields (to consumer: epochs, target assignment, ...)
  ARGV[7] members    msgpack array: member id, packed member, member id, packed member, ...
  ARGV[8] instances  to classic: msgpack array of instance id, member id, ... (unused to consumer)
  Returns {0, new version} when converted, {1, current version} when the group being replaced
  moved on, {16} when another gateway coordinates the group.
]]
local rcall = redis.call

local owner = rcall('GET', KEYS[3])
if owner and string.match(owner, '^(%S+)') ~= ARGV[2] then return {16} end
local from_meta, to_meta = KEYS[4], KEYS[1]
if ARGV[1] == 'classic' then from_meta, to_meta = KEYS[1], KEYS[4] end
local current = tonumber(rcall('HGET', from_meta, 'v') or '0')
if current ~= tonumber(ARGV[3]) then return {1, current} end
-- versions only grow under an id, whichever protocol's hash holds it
local version = math.max(current, tonumber(rcall('HGET', to_meta, 'v') or '0')) + 1
rcall('DEL', KEYS[1], KEYS[2], KEYS[4], KEYS[5], KEYS[6])
local members = cmsgpack.unpack(ARGV[7])
if ARGV[1] == 'consumer' then
  rcall('HSET', KEYS[1], 'v', version, 'doc', ARGV[6])
  if #members > 0 then rcall('HSET', KEYS[2], unpack(members)) end
else
  rcall('HSET', KEYS[4], 'v', version, 'state', ARGV[4], 'gen', ARGV[5], 'doc', ARGV[6])
  if #members > 0 then rcall('HSET', KEYS[5], unpack(members)) end
  local instances = cmsgpack.unpack(ARGV[8])
  if #instances > 0 then rcall('HSET', KEYS[6], unpack(instances)) end
end
return {0, version}
