--[[
  Delete a frozen partition (partition-drop-1): the keys a scan found after it froze, and its meta
  hash with them, in one step. Safe to repeat, and never deletes a newer incarnation's partition.
  KEYS[1] meta   the partition's meta hash (hw, start, maxts, bytes, gen)
  ARGV[1] gen    the incarnation being dropped
  ARGV[2] keys   msgpack list of the partition's keys found (only those of its hash tag are deleted)
  Returns the number of keys deleted, the meta hash included; 0 when it is gone already, not
  frozen, or of a newer incarnation.
]]
local rcall = redis.call
--- @include "topic"

if rcall('EXISTS', KEYS[1]) == 0 then return 0 end
local meta = rcall('HMGET', KEYS[1], 'gen', 'hw')
if meta[2] or incarnation(meta[1]) > tonumber(ARGV[1]) then return 0 end
local tag = string.match(KEYS[1], '^(.-})')
local deleted = 0
for _, key in ipairs(cmsgpack.unpack(ARGV[2])) do
  if string.sub(key, 1, #tag) == tag and key ~= KEYS[1] then deleted = deleted + rcall('DEL', key) end
end
return deleted + rcall('DEL', KEYS[1])
