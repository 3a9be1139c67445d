--[[
  Replace a group's state if nobody changed it since it was read: compare-and-set on a version.
  KEYS[1] meta       the group's meta hash: v (version), state, gen, doc
  KEYS[2] members    member id -> packed member
  KEYS[3] instances  group.instance.id -> member id, for static members
  KEYS[4] owner      the group's coordinator lease "<node id> <host> <port>"
  ARGV[1] version    the version that was read; 0 when the group did not exist
  ARGV[2] state      the classic group state name (Empty, PreparingRebalance, ...)
  ARGV[3] generation the generation id
  ARGV[4] doc        packed group fields no script reads (protocol type and name, leader)
  ARGV[5] members    msgpack array: member id, packed member, member id, packed member, ...
  ARGV[6] instances  msgpack array: instance id, member id, ...
  ARGV[7] node       the saving gateway's node id: refused while another gateway holds the lease
  Returns {0, new version} when saved, {1, current version} when the version moved on,
  {16} when another gateway coordinates the group.
]]
local rcall = redis.call

local owner = rcall('GET', KEYS[4])
if owner and string.match(owner, '^(%S+)') ~= ARGV[7] then return {16} end
local current = tonumber(rcall('HGET', KEYS[1], 'v') or '0')
if current ~= tonumber(ARGV[1]) then return {1, current} end
local version = current + 1
rcall('HSET', KEYS[1], 'v', version, 'state', ARGV[2], 'gen', ARGV[3], 'doc', ARGV[4])
rcall('DEL', KEYS[2], KEYS[3])
local members = cmsgpack.unpack(ARGV[5])
if #members > 0 then rcall('HSET', KEYS[2], unpack(members)) end
local instances = cmsgpack.unpack(ARGV[6])
if #instances > 0 then rcall('HSET', KEYS[3], unpack(instances)) end
return {0, version}
