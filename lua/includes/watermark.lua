-- Helpers over a partition's watermark index. A mark is "<offset> <txn> <WatermarkMark bytes>" in
-- a sorted set by offset, <txn> being "pid:first offset" (the member format of the aborted-ranges
-- set) while its transaction is unsettled, else "-". A snapshot is "<offset>[ <pending offset>...]"
-- in a sorted set by offset, its bytes in a hash by offset.

local function wm_num(n)
  return string.format('%d', n)
end

-- The offsets named by a snapshot's member: its own, then those of its pending marks.
local function wm_offsets(member)
  local out = {}
  for w in string.gmatch(member, '%d+') do out[#out + 1] = w end
  return out
end

-- The last stable offset: the first offset of the oldest open transaction, or the high watermark.
local function wm_stable(txns, hw)
  local lso = hw
  for _, v in ipairs(redis.call('HVALS', txns)) do
    local first = tonumber(string.match(v, '^(%d+):'))
    if first < lso then lso = first end
  end
  return lso
end

-- Whether a mark counts: 'c' (plain, or its transaction committed), 'a' (aborted), 'o' (still open).
local function wm_status(txns, aborted, member)
  local tref = string.match(member, '^%d+ (%S+) ')
  if tref == '-' then return 'c' end
  local pid, first = string.match(tref, '^(%d+):(%d+)$')
  local open = redis.call('HGET', txns, pid)
  if open and string.match(open, '^(%d+):') == first then return 'o' end
  if redis.call('ZSCORE', aborted, tref) then return 'a' end
  return 'c'
end

-- Marks in [lo, hi) (lo may be '-inf'), at most `limit` (0: all), as a flat list of member, status.
local function wm_marks(marks, txns, aborted, lo, hi, limit)
  local found
  if limit > 0 then
    found = redis.call('ZRANGEBYSCORE', marks, lo, '(' .. wm_num(hi), 'LIMIT', 0, limit)
  else
    found = redis.call('ZRANGEBYSCORE', marks, lo, '(' .. wm_num(hi))
  end
  local out = {}
  for _, m in ipairs(found) do
    out[#out + 1] = m
    out[#out + 1] = wm_status(txns, aborted, m)
  end
  return out
end
