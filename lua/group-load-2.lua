--[[
  Read a group's meta and members at one instant, so a load never pairs a version with other members.
  KEYS[1] meta     the group's meta hash: v, state, gen, doc
  KEYS[2] members  member id -> packed member
  Returns {meta as a flat field/value list, members as a flat field/value list}.
]]
local rcall = redis.call
return {rcall('HGETALL', KEYS[1]), rcall('HGETALL', KEYS[2])}
