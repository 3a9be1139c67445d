--[[
  Delete a group with its committed offsets and lag history, only while it has no members.
  KEYS[1] meta       the group's meta hash
  KEYS[2] members    member id -> packed member
  KEYS[3] instances  group.instance.id -> member id
  KEYS[4] offsets    "topic:partition" -> packed committed offset
  KEYS[5] lag        the group's lag history (stream)
  Returns {0} when deleted, {69} when there is no such group, {68} when it has members.
]]
local rcall = redis.call

if rcall('EXISTS', KEYS[1]) == 0 and rcall('EXISTS', KEYS[4]) == 0 then return {69} end
if rcall('HLEN', KEYS[2]) > 0 then return {68} end
rcall('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
return {0}
