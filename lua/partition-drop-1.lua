--[[
  Freeze a partition of a deleted incarnation (or of an older one). Without `hw` it is no partition
  to readers, and no script writes to it any more, so the keys a scan finds next are all it has.
  KEYS[1] meta   the partition's meta hash (hw, start, maxts, bytes, gen)
  ARGV[1] gen    the deleted incarnation: a newer one's partition is left alone
  Returns 1 frozen (purge it next), 0 when nothing of that incarnation or an older one is there.
]]
local rcall = redis.call
--- @include "topic"

if rcall('EXISTS', KEYS[1]) == 0 then return 0 end
if incarnation(rcall('HGET', KEYS[1], 'gen')) > tonumber(ARGV[1]) then return 0 end
rcall('HDEL', KEYS[1], 'hw')
return 1
