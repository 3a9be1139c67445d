--[[
  Make a partition of a topic's incarnation: its meta hash, marked with the incarnation. Made once
  (again it does nothing) and never over a newer incarnation's partition, so a gateway that lost a
  race, or woke late, cannot touch the winner's.
  KEYS[1] meta   the partition's meta hash (hw, start, maxts, bytes, gen)
  ARGV[1] gen    the topic's incarnation
  Returns 1 made; 0 made before; -1 it still held an older incarnation, frozen now: purge it
  (partition-purge-1) and ask again; -2 it belongs to a newer incarnation, or this one is being
  dropped.
]]
local rcall = redis.call
--- @include "topic"

local gen = tonumber(ARGV[1])
if rcall('EXISTS', KEYS[1]) == 0 then
  rcall('HSET', KEYS[1], 'hw', 0, 'start', 0, 'maxts', -1, 'bytes', 0, 'gen', ARGV[1])
  return 1
end
local meta = rcall('HMGET', KEYS[1], 'gen', 'hw')
local held = incarnation(meta[1])
if held == gen and meta[2] then return 0 end
if held < gen then
  rcall('HDEL', KEYS[1], 'hw')
  return -1
end
return -2
