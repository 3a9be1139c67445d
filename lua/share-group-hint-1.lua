--[[
  Add a share group to the set of share group ids, or take it out (the hint ListGroups reads; the
  group's own keys are in its own slot).
  KEYS[1] groups   set of share group ids
  ARGV[1] group    the group id
  ARGV[2] add      1 to add, 0 to remove
  Returns {0}.
]]
local rcall = redis.call
if ARGV[2] == '1' then
  rcall('SADD', KEYS[1], ARGV[1])
else
  rcall('SREM', KEYS[1], ARGV[1])
end
return {0}
