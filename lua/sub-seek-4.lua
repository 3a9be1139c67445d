--[[
  Move a subscription's cursor on one partition to an offset, forgetting its individual acks and
  the delivery counts of its records (they start afresh).
  KEYS[1] sub      the subscription's hash (cursor)
  KEYS[2] acks     sorted set of offsets acked individually
  KEYS[3] meta     the partition's meta hash (hw, start)
  KEYS[4] deliveries  hash of offset -> times delivered (see sub-deliver-3)
  ARGV[1] offset   the next offset to deliver; -1 for the log start, -2 for the high watermark
  Returns {0, cursor} (clamped into the log), {2} for no partition, {15} for no subscription.
]]
local rcall = redis.call
--- @include "cursor"

local meta = rcall('HMGET', KEYS[3], 'hw', 'start')
if not meta[1] then return {2} end
if rcall('HEXISTS', KEYS[1], 'cursor') == 0 then return {15} end
local hw, start = tonumber(meta[1]), tonumber(meta[2])
local offset = tonumber(ARGV[1])
if offset == -2 or offset > hw then offset = hw end
if offset < start then offset = start end
rcall('DEL', KEYS[2], KEYS[4])
rcall('HSET', KEYS[1], 'cursor', fmt(offset))
return {0, offset}
