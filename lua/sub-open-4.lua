--[[
  Open a subscription on one partition, creating it at its initial position the first time.
  KEYS[1] sub      the subscription's hash (cursor, mode, created)
  KEYS[2] acks     sorted set of offsets acked individually at or above the cursor
  KEYS[3] meta     the partition's meta hash (hw, start)
  KEYS[4] subs     set of subscription names on the partition
  ARGV[1] name     the subscription's name
  ARGV[2] initial  'earliest' or 'latest': where a new subscription starts
  ARGV[3] mode     exclusive, failover or shared (recorded, for the admin face)
  ARGV[4] now_ms   the current time
  Returns {0, cursor, highest individually acked offset or -1, 1 if created else 0}, or {2} for no partition.
]]
local rcall = redis.call
--- @include "cursor"

local meta = rcall('HMGET', KEYS[3], 'hw', 'start')
if not meta[1] then return {2} end
local hw, start = tonumber(meta[1]), tonumber(meta[2])
local created = 0
local cursor = rcall('HGET', KEYS[1], 'cursor')
if cursor then
  cursor = tonumber(cursor)
else
  created = 1
  if ARGV[2] == 'latest' then cursor = hw else cursor = start end
  rcall('HSET', KEYS[1], 'created', ARGV[4])
  rcall('SADD', KEYS[4], ARGV[1])
end
cursor = advance_cursor(KEYS[2], cursor_within_log(KEYS[3], cursor))
rcall('HSET', KEYS[1], 'cursor', fmt(cursor), 'mode', ARGV[3])
local top = rcall('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
local max_acked = -1
if #top > 0 then max_acked = tonumber(top[2]) end
return {0, cursor, max_acked, created}
