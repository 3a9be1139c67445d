--[[
  Find the first record batch (never a control batch) holding a record at or after a timestamp,
  at or after an offset (Kafka ListOffsets by time).
  KEYS[1] log      the partition's stream
  KEYS[2] meta     the partition's meta hash
  ARGV[1] ts       the timestamp in epoch milliseconds
  ARGV[2] from     look at batches from the one holding this offset on (-1: the log start)
  Returns {0, log start, base offset, record count, batch bytes}; {0, log start, -1} when no record
  is that late; {0, log start, -2, offset} when SCAN batches were looked at without deciding: ask
  again from that offset; or {2} for no partition.
  Each entry's `t` is the running maximum of its data batches' timestamps (control batches add
  nothing), so a bisection finds the first entry where it reaches `ts`. That entry holds such a
  record unless it is the first one searched, whose `t` may come from batches (or records) before
  the log start: from there on, the batches' own headers decide.
]]
local rcall = redis.call
--- @include "entry"

local SCAN = 512

-- Whether a RecordBatch v2 is a data batch whose max timestamp reaches `ts`: attributes at byte
-- 21 (control flag 0x20), max timestamp at byte 35.
local function reaches(batch, ts)
  if math.floor(string.byte(batch, 23) / 32) % 2 == 1 then return false end
  return struct.unpack('>i8', batch, 36) >= ts
end

local meta = rcall('HMGET', KEYS[2], 'hw', 'start')
if not meta[1] then return {2} end
local hw, start = tonumber(meta[1]), tonumber(meta[2])
local ts = tonumber(ARGV[1])
local from = math.max(start, tonumber(ARGV[2]))
if from >= hw then return {0, start, -1} end
local first = entry_at(KEYS[1], from) or from
local s = first_entry_where(KEYS[1], first, hw, function(f) return tonumber(f['t']) >= ts end)
if s >= hw then return {0, start, -1} end

local lo, after = entry_id(s), s
local looked = 0
while looked < SCAN do
  local entries = rcall('XRANGE', KEYS[1], lo, '+', 'COUNT', 64)
  if #entries == 0 then return {0, start, -1} end
  for _, e in ipairs(entries) do
    local f = entry_fields(e)
    local base = tonumber(string.match(e[1], '^(%d+)-'))
    if reaches(f['b'], ts) then return {0, start, base, tonumber(f['n']), f['b']} end
    after = base + tonumber(f['n'])
  end
  looked = looked + #entries
  lo = '(' .. entries[#entries][1]
end
return {0, start, -2, after}
