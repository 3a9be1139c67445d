--[[
  Remove some ACL entries and add others, in one step (DeleteAcls of several filters is atomic in
  Kafka; splitting a stored `admin` entry removes it and adds what stays).
  KEYS[1] acls    set of ACL entries (each a msgpack list)
  ARGV[1] remove  msgpack array of the entries to remove
  ARGV[2] add     msgpack array of the entries to add
  Returns {removed, added}: per entry to remove, 1 when it was there; per entry to add, 1 when new.
]]
local rcall = redis.call

local removed, added = {}, {}
for _, entry in ipairs(cmsgpack.unpack(ARGV[1])) do
  removed[#removed + 1] = rcall('SREM', KEYS[1], entry)
end
for _, entry in ipairs(cmsgpack.unpack(ARGV[2])) do
  added[#added + 1] = rcall('SADD', KEYS[1], entry)
end
return {removed, added}
