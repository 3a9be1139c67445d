--[[
  Move a partition's log start forward and drop the entries wholly below it (retention, DeleteRecords).
  KEYS[1] log      the partition's stream
  KEYS[2] meta     the partition's meta hash
  KEYS[3] aborted  aborted transaction ranges, pruned below the new start
  ARGV[1] now_ms   the current time
  ARGV[2] retention_ms     keep entries newer than this, -1 for no limit
  ARGV[3] retention_bytes  keep at most this many bytes, -1 for no limit
  ARGV[4] min_start        an explicit new log start (DeleteRecords), -1 for none; -2 means the high watermark
  ARGV[5] epoch            the retention role's lease epoch (see includes/role.lua), -1 for DeleteRecords
  Returns {0, new log start, entries removed} or {code}: 2 no such partition, 8 offset past the high
  watermark, 13 an epoch older than one the partition has seen.
  On a compacted partition the entries below its clean boundary `cb` are in the cleaned stream:
  retention looks at the main stream from `cb` on only, and leaves the cleaned part to the cleaner.
]]
local rcall = redis.call
--- @include "entry"
--- @include "role"

local meta = rcall('HMGET', KEYS[2], 'hw', 'start', 'bytes', 'cb')
if not meta[1] then return {2} end
if role_stale(KEYS[2], 'retention_epoch', tonumber(ARGV[5])) then return {13} end
local hw, start, bytes = tonumber(meta[1]), tonumber(meta[2]), tonumber(meta[3] or '0')
local now, ret_ms, ret_bytes = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local min_start = tonumber(ARGV[4])

-- the first entry still inside the log: `start` may sit in the middle of a batch
local first = start
local fb = entry_at(KEYS[1], start)
if fb ~= nil then first = fb end
local cb = tonumber(meta[4] or '0')
if cb > first then first = cb end
-- a cut at the first main entry may belong inside the cleaned part: the cleaner's to make
local function cut(s)
  if s == first and first == cb and cb > start then return start end
  return s
end

local new_start = start
if ret_ms >= 0 then
  local cutoff = now - ret_ms
  local s = cut(first_entry_where(KEYS[1], first, hw, function(f) return tonumber(f['t']) >= cutoff end))
  if s > new_start then new_start = s end
end
if ret_bytes >= 0 and bytes > ret_bytes then
  local floor = bytes - ret_bytes
  local s = cut(first_entry_where(KEYS[1], first, hw, function(f) return tonumber(f['c']) >= floor end))
  if s > new_start then new_start = s end
end
if min_start == -2 then min_start = hw end
if min_start > hw then return {8} end
if min_start > new_start then new_start = min_start end
if new_start == start then return {0, start, 0} end

local min_id = entry_id(new_start)
local base = entry_at(KEYS[1], new_start)
if base ~= nil and base < new_start then min_id = entry_id(base) end
local removed = rcall('XTRIM', KEYS[1], 'MINID', min_id)
rcall('HSET', KEYS[2], 'start', string.format('%d', new_start))
rcall('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. string.format('%d', new_start))
return {0, new_start, removed}
