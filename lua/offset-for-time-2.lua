--[[
  Find the first batch holding a record at or after a timestamp (Kafka ListOffsets by time).
  KEYS[1] log      the partition's stream
  KEYS[2] meta     the partition's meta hash
  ARGV[1] ts       the timestamp in epoch milliseconds
  Returns {0, base offset, batch bytes}, {0, -1} when no record is that late, or {2} for no partition.
  Each entry's `t` is the running maximum of timestamps, so the search is a bisection.
]]
local rcall = redis.call
--- @include "entry"

local meta = rcall('HMGET', KEYS[2], 'hw', 'start')
if not meta[1] then return {2} end
local hw, start = tonumber(meta[1]), tonumber(meta[2])
local ts = tonumber(ARGV[1])
local first = entry_at(KEYS[1], start) or start
local s = first_entry_where(KEYS[1], first, hw, function(f) return tonumber(f['t']) >= ts end)
if s >= hw then return {0, -1} end
local base, _, f = entry_at(KEYS[1], s)
return {0, base, f['b']}
