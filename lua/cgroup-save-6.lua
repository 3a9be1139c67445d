--[[
  Replace a KIP-848 consumer group's state if nobody changed it since it was read (compare-and-set
  on a version), while no classic group of the same id has members. The first save of a consumer
  group removes an empty classic group of its id (its committed offsets stay), as Kafka replaces an
  empty classic group by a consumer group.
  KEYS[1] cmeta             the consumer group's hash: v (version), doc
  KEYS[2] cmembers          member id -> packed member
  KEYS[3] owner             the group's coordinator lease "<node id> <host> <port>"
  KEYS[4] meta              the classic group's meta hash
  KEYS[5] members           the classic group's members
  KEYS[6] instances         the classic group's static members
  ARGV[1] version           the version that was read; 0 when the group did not exist
  ARGV[2] doc               the packed group (epochs, target assignment, what it was computed from)
  ARGV[3] members           msgpack array: member id, packed member, member id, packed member, ...
  ARGV[4] node              the saving gateway's node id: refused while another gateway holds the lease
  Returns {0, new version} when saved, {1, current version} when the version moved on,
  {16} when another gateway coordinates the group, {69} when a classic group of this id has members.
]]
local rcall = redis.call

local owner = rcall('GET', KEYS[3])
if owner and string.match(owner, '^(%S+)') ~= ARGV[4] then return {16} end
local current = tonumber(rcall('HGET', KEYS[1], 'v') or '0')
if current ~= tonumber(ARGV[1]) then return {1, current} end
if rcall('HLEN', KEYS[5]) > 0 then return {69} end
if current == 0 then rcall('DEL', KEYS[4], KEYS[6]) end
local version = current + 1
rcall('HSET', KEYS[1], 'v', version, 'doc', ARGV[2])
rcall('DEL', KEYS[2])
local members = cmsgpack.unpack(ARGV[3])
if #members > 0 then rcall('HSET', KEYS[2], unpack(members)) end
return {0, version}
