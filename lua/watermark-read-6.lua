--[[
  What the watermark of a partition at an offset is made of: the latest snapshot at or below it,
  the state of that snapshot's pending marks, and the marks from the snapshot up to the offset.
  KEYS[1] meta     the partition's meta hash (hw, start)
  KEYS[2] txns     open transactions on the partition: pid -> "first offset:epoch"
  KEYS[3] aborted  aborted ranges: member "pid:first offset", score = marker offset
  KEYS[4] marks    the partition's watermark markers (see includes/watermark.lua)
  KEYS[5] snaps    snapshot index: member "<offset>[ <pending offset>...]", score = offset
  KEYS[6] snapdata snapshot offset -> WatermarkSnapshot bytes
  ARGV[1] offset     the position; -1 for the high watermark
  ARGV[2] committed  1: an offset past the last stable offset counts as the last stable offset
  ARGV[3] ahead      also return up to this many marks from the offset to the last stable offset
  Returns {0, offset used, hw, last stable offset, snapshot offset or -1, snapshot bytes or '',
  {pending offset, status, ...}, {mark, status, ...}, {mark ahead, status, ...}} or {2} for no partition.
  A status is 'c' (counts), 'a' (aborted) or 'o' (its transaction is open).
]]
local rcall = redis.call
--- @include "watermark"

local meta = rcall('HMGET', KEYS[1], 'hw', 'start')
if not meta[1] then return {2} end
local hw, start = tonumber(meta[1]), tonumber(meta[2])
local lso = wm_stable(KEYS[2], hw)
local at = tonumber(ARGV[1])
if at < 0 or at > hw then at = hw end
if ARGV[2] == '1' and at > lso then at = lso end
if at < start then at = start end

local base, blob, pending = -1, '', {}
local snap = rcall('ZREVRANGEBYSCORE', KEYS[5], at, '-inf', 'LIMIT', 0, 1)
if #snap > 0 then
  local ids = wm_offsets(snap[1])
  base = tonumber(ids[1])
  blob = rcall('HGET', KEYS[6], ids[1]) or ''
  for i = 2, #ids do
    local m = rcall('ZRANGEBYSCORE', KEYS[4], ids[i], ids[i])
    pending[#pending + 1] = ids[i]
    pending[#pending + 1] = #m > 0 and wm_status(KEYS[2], KEYS[3], m[1]) or 'a'
  end
end
local lo = base >= 0 and wm_num(base) or '-inf'
local found = wm_marks(KEYS[4], KEYS[2], KEYS[3], lo, at, 0)
local ahead = {}
local n = tonumber(ARGV[3])
if n > 0 and at < lso then ahead = wm_marks(KEYS[4], KEYS[2], KEYS[3], wm_num(at), lso, n) end
return {0, at, hw, lso, base, blob, pending, found, ahead}
