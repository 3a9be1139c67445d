--[[
  Store a W_SNAPSHOT of a partition's watermark set, then forget what the log no longer needs:
  snapshots below the latest one at or below the log start, and the marks below that one (and its
  pending marks).
  KEYS[1] meta     the partition's meta hash (start)
  KEYS[2] marks    the partition's watermark markers (see includes/watermark.lua)
  KEYS[3] snaps    snapshot index: member "<offset>[ <pending offset>...]", score = offset
  KEYS[4] snapdata snapshot offset -> WatermarkSnapshot bytes
  KEYS[5] wmeta    watermark meta hash: n, markers since the latest snapshot
  ARGV[1] offset   the snapshot covers every mark below this offset
  ARGV[2] pending  offsets of the marks of open transactions below it, space-separated (may be empty)
  ARGV[3] snapshot the WatermarkSnapshot bytes
  Returns {0, 1 if stored (0 when one at or above the offset exists), snapshots pruned, marks pruned},
  or {2} for no partition.
]]
local rcall = redis.call
--- @include "watermark"

local meta = rcall('HMGET', KEYS[1], 'hw', 'start')
if not meta[1] then return {2} end
local offset = tonumber(ARGV[1])
local top = rcall('ZREVRANGE', KEYS[3], 0, 0, 'WITHSCORES')
if #top > 0 and tonumber(top[2]) >= offset then return {0, 0, 0, 0} end
local member = wm_num(offset)
if ARGV[2] ~= '' then member = member .. ' ' .. ARGV[2] end
rcall('ZADD', KEYS[3], offset, member)
rcall('HSET', KEYS[4], wm_num(offset), ARGV[3])
rcall('HSET', KEYS[5], 'n', rcall('ZCOUNT', KEYS[2], offset, '+inf'))

local start = tonumber(meta[2])
local keep = rcall('ZREVRANGEBYSCORE', KEYS[3], start, '-inf', 'LIMIT', 0, 1)
if #keep == 0 then return {0, 1, 0, 0} end
local ids = wm_offsets(keep[1])
local low = tonumber(ids[1])
for i = 2, #ids do low = math.min(low, tonumber(ids[i])) end
local old = rcall('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. ids[1])
for _, m in ipairs(old) do
  rcall('HDEL', KEYS[4], wm_offsets(m)[1])
  rcall('ZREM', KEYS[3], m)
end
local pruned = rcall('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. wm_num(low))
return {0, 1, #old, pruned}
