--[[
  Keep the scheduler's index of partitions by next delivery time. A hint only lowers a time, unless
  the caller proves (by the version it read before its move step) that no schedule came in between.
  KEYS[1] due      sorted set: "topic:partition" -> earliest delivery time waiting there
  KEYS[2] versions hash: "topic:partition" -> count of lowering hints, bumped by every schedule
  KEYS[3] parts    set of every partition that ever held a delayed message (for a resync)
  ARGV[1] member   "topic:partition"
  ARGV[2] at       the delivery time, -1 for none waiting
  ARGV[3] version  -1 to lower (after a schedule); else the version read before a move step: set
  Returns the earliest time in `due` after the change, or -1 when it is empty.
]]
local rcall = redis.call
local member, at, version = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if version < 0 then
  rcall('SADD', KEYS[3], member)
  rcall('HINCRBY', KEYS[2], member, 1)
  if at >= 0 then rcall('ZADD', KEYS[1], 'LT', at, member) end
elseif tonumber(rcall('HGET', KEYS[2], member) or '0') == version then
  if at >= 0 then rcall('ZADD', KEYS[1], at, member) else rcall('ZREM', KEYS[1], member) end
elseif at >= 0 then
  rcall('ZADD', KEYS[1], 'LT', at, member)
end
local head = rcall('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #head == 0 then return -1 end
return tonumber(head[2])
