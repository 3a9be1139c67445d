--[[
  Append a watermark marker (W_SET or W_IDLE) to a partition log as a control batch, and index it.
  KEYS[1] log      the partition's stream
  KEYS[2] meta     the partition's meta hash (hw, maxts, bytes)
  KEYS[3] txns     open transactions on the partition: pid -> "first offset:epoch"
  KEYS[4] pids     idempotent producer state: a marker of a newer epoch fences older writes
  KEYS[5] marks    the partition's watermark markers (see includes/watermark.lua)
  KEYS[6] wmeta    watermark meta hash: n, markers since the latest snapshot
  KEYS[7] wtxns    transaction id -> offsets of its markers here, until it is settled
  ARGV[1] batch    the control batch (RecordBatch v2) that goes into the log
  ARGV[2] mark     the WatermarkMark bytes, as indexed
  ARGV[3] txn      the transaction id, '' outside a transaction
  ARGV[4] pid      the transaction's producer id (-1 outside one)
  ARGV[5] epoch    the transaction's producer epoch
  ARGV[6] since    write nothing if a mark starting with ARGV[7] is at or after this offset; -1: write
  ARGV[7] owner    a producer's marks' first bytes (its name field), for ARGV[6]
  Returns {0, offset, markers since the latest snapshot}, {0, -1, 0} when ARGV[6] held it back, {2} for
  no partition, {11} for a stale epoch.
  A transactional marker holds the last stable offset like a transactional batch until its marker.
]]
local rcall = redis.call
--- @include "entry"
--- @include "watermark"
--- @include "producer"

local meta = rcall('HMGET', KEYS[2], 'hw', 'maxts', 'bytes')
if not meta[1] then return {2} end
local hw = tonumber(meta[1])
if ARGV[6] ~= '-1' then
  for _, m in ipairs(rcall('ZRANGEBYSCORE', KEYS[5], ARGV[6], '+inf')) do
    local a = string.find(m, ' ', 1, true)
    local b = string.find(m, ' ', a + 1, true)
    if string.sub(m, b + 1, b + #ARGV[7]) == ARGV[7] then return {0, -1, 0} end
  end
end
local tref = '-'
if ARGV[3] ~= '' then
  local pid, epoch = ARGV[4], tonumber(ARGV[5])
  local raw = rcall('HGET', KEYS[4], pid)
  if raw and producer_epoch(raw) > epoch then return {11} end
  local first = wm_num(hw)
  local open = rcall('HGET', KEYS[3], pid)
  if open then
    first = string.match(open, '^(%d+):')
  else
    rcall('HSET', KEYS[3], pid, first .. ':' .. ARGV[5])
  end
  tref = pid .. ':' .. first
  local prev = rcall('HGET', KEYS[7], ARGV[3])
  rcall('HSET', KEYS[7], ARGV[3], (prev and (prev .. ' ') or '') .. wm_num(hw))
end
append_entry(KEYS[1], KEYS[2], hw, tonumber(meta[2] or '-1'), tonumber(meta[3] or '0'), ARGV[1], 1, -1)
rcall('ZADD', KEYS[5], hw, wm_num(hw) .. ' ' .. tref .. ' ' .. ARGV[2])
return {0, hw, rcall('HINCRBY', KEYS[6], 'n', 1)}
