--[[
  Acknowledge offsets of one partition for a subscription, moving its cursor over every
  contiguous run of acks. Offsets a transaction holds pending are refused.
  KEYS[1] sub      the subscription's hash (cursor)
  KEYS[2] acks     sorted set of offsets acked individually at or above the cursor
  KEYS[3] meta     the partition's meta hash (start)
  KEYS[4] pending  offsets locked by transactions (see includes/pending.lua)
  ARGV[1] upto     cumulative: every offset below this is acked; -1 for none
  ARGV[2] offsets  offsets acked individually, space-separated (may be empty)
  Returns {0, cursor}, {15} when the subscription does not exist, {20, txn} when a transaction
  holds one of the offsets (nothing is acked then).
]]
local rcall = redis.call
--- @include "cursor"
--- @include "pending"

local cursor = rcall('HGET', KEYS[1], 'cursor')
if not cursor then return {15} end
cursor = tonumber(cursor)
local upto = tonumber(ARGV[1])
if rcall('EXISTS', KEYS[4]) == 1 then
  if upto > cursor then
    local h = pending_below(KEYS[4], upto, '')
    if h then return {20, h} end
  end
  for o in string.gmatch(ARGV[2], '%d+') do
    local h = pending_holder(KEYS[4], tonumber(o), '')
    if h then return {20, h} end
  end
end
if upto > cursor then cursor = upto end
cursor = cursor_within_log(KEYS[3], cursor)
local batch = {}
for o in string.gmatch(ARGV[2], '%d+') do
  if tonumber(o) >= cursor then
    batch[#batch + 1] = o
    batch[#batch + 1] = o
    if #batch >= 1000 then
      rcall('ZADD', KEYS[2], unpack(batch))
      batch = {}
    end
  end
end
if #batch > 0 then rcall('ZADD', KEYS[2], unpack(batch)) end
cursor = advance_cursor(KEYS[2], cursor)
rcall('HSET', KEYS[1], 'cursor', fmt(cursor))
return {0, cursor}
