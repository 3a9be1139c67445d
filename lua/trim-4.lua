--[[
  Move a partition's log start forward and drop the entries wholly below it (retention, DeleteRecords).
  KEYS[1] log      the partition's stream
  KEYS[2] meta     the partition's meta hash
  KEYS[3] aborted  aborted transaction ranges, pruned below the new start
  KEYS[4] manifest the partition's tiered segments (see tier-add-2.lua): retention looks at them
                   first, oldest first, each one whole; those below the new start leave it
  ARGV[1] now_ms   the current time
  ARGV[2] retention_ms     keep entries newer than this, -1 for no limit
  ARGV[3] retention_bytes  keep at most this many bytes, -1 for no limit
  ARGV[4] min_start        an explicit new log start (DeleteRecords), -1 for none; -2 means the high watermark
  ARGV[5] epoch            the retention role's lease epoch (see includes/role.lua), -1 for DeleteRecords
  Returns {0, new log start, entries removed, segments unlisted...} or {code}: 2 no such partition, 8 offset past the high
  watermark, 13 an epoch older than one the partition has seen.
  On a compacted partition the entries below its clean boundary `cb` are in the cleaned stream:
  retention looks at the main stream from `cb` on only, and leaves the cleaned part to the cleaner.
  On a tiered partition the stream starts at its local log start `ls` (tier-trim-3.lua): the
  stream's entries count for retention only once no segment stays.
]]
local rcall = redis.call
--- @include "entry"
--- @include "role"

local meta = rcall('HMGET', KEYS[2], 'hw', 'start', 'bytes', 'cb', 'ls')
if not meta[1] then return {2} end
if role_stale(KEYS[2], 'retention_epoch', tonumber(ARGV[5])) then return {13} end
local hw, start, bytes = tonumber(meta[1]), tonumber(meta[2]), tonumber(meta[3] or '0')
local now, ret_ms, ret_bytes = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local min_start = tonumber(ARGV[4])

-- the first entry still inside the log: `start` may sit in the middle of a batch
local lstart = math.max(start, tonumber(meta[5] or '0'))
local first = lstart
local fb = entry_at(KEYS[1], lstart)
if fb ~= nil then first = fb end
local cb = tonumber(meta[4] or '0')
if cb > first then first = cb end
-- a cut at the first main entry may belong inside the cleaned part: the cleaner's to make
local function cut(s)
  if s == first and first == cb and cb > start then return start end
  return s
end

local new_start = start
-- segments: a whole one goes once past retention (Kafka's RemoteLogManager deletes whole segments)
local segs = rcall('ZRANGE', KEYS[4], 0, -1)
local remote_left = false
for _, m in ipairs(segs) do
  local _, nxt, mts, c, size = string.match(m, '^(%d+):(%d+):(%-?%d+):(%d+):(%d+):')
  nxt, mts, c, size = tonumber(nxt), tonumber(mts), tonumber(c), tonumber(size)
  if nxt > start then
    local expired = (ret_ms >= 0 and mts < now - ret_ms) or (ret_bytes >= 0 and bytes - (c + size) >= ret_bytes)
    if not expired then
      remote_left = true
      break
    end
    if nxt > new_start then new_start = nxt end
  end
end
if remote_left then ret_ms, ret_bytes = -1, -1 end
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
local gone = {}
for _, m in ipairs(segs) do
  local nxt = tonumber(string.match(m, '^%d+:(%d+):'))
  if nxt <= new_start then gone[#gone + 1] = m end
end
if new_start == start and #gone == 0 then return {0, start, 0} end
for _, m in ipairs(gone) do rcall('ZREM', KEYS[4], m) end

local min_id = entry_id(new_start)
local base = entry_at(KEYS[1], new_start)
if base ~= nil and base < new_start then min_id = entry_id(base) end
local removed = rcall('XTRIM', KEYS[1], 'MINID', min_id)
rcall('HSET', KEYS[2], 'start', string.format('%d', new_start))
rcall('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. string.format('%d', new_start))
local out = {0, new_start, removed}
for _, m in ipairs(gone) do out[#out + 1] = m end
return out
