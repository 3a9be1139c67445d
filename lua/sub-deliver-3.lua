--[[
  Count the deliveries of offsets a shared subscription with a delivery limit hands out, so that a
  record delivered again by the next gateway after a crash carries its count: each offset under
  the limit is counted once more; one delivered `limit` times already is not (it is to be archived).
  A first delivery costs no write per offset: the hash's `next` field is the offset below which
  every offset handed out was delivered at least once, and a count is kept only from the second
  delivery on (an offset below `next` without one was delivered once; one kept as 0 was handed out
  and taken back unsent, sub-undeliver-2). The log is handed out in
  order, so offsets at or above `next` are new. The counts of acknowledged offsets (below the
  cursor, or acked individually) are swept out when the hash has doubled since the last sweep, so a
  sweep costs O(1) per count kept.
  KEYS[1] sub      the subscription's hash (cursor; dsweep: the size that triggers the next sweep)
  KEYS[2] counts   hash of offset -> deliveries so far (from 2 on), and next
  KEYS[3] acks     sorted set of offsets acked individually
  ARGV[1] limit    deliveries after which a record is archived
  ARGV[2] offsets  space-separated offsets or first-last ranges being handed out, ascending
  Returns {0, 1} when every offset is delivered for the first time; else {0, 0, n1, n2, ...}: per
  offset its count with this delivery, or minus its count when it is at the limit already; {15}
  for no subscription.
]]
local rcall = redis.call

local sub = rcall('HMGET', KEYS[1], 'cursor', 'dsweep')
local cursor = tonumber(sub[1])
if not cursor then return {15} end
local limit = tonumber(ARGV[1])
local mark = rcall('HGET', KEYS[2], 'next')
local nxt = tonumber(mark or '0')
if not mark then -- counts kept before the mark was: every offset counted lies below it
  for _, field in ipairs(rcall('HKEYS', KEYS[2])) do
    local o = tonumber(field)
    if o and o >= nxt then nxt = o + 1 end
  end
end
local out, again, top = {0, 0}, false, nxt
for first, last in string.gmatch(ARGV[2], '(%d+)%-?(%d*)') do
  first = tonumber(first)
  for o = first, tonumber(last) or first do
    if o >= nxt then
      out[#out + 1] = 1
      if o >= top then top = o + 1 end
    else
      again = true
      local seen = tonumber(rcall('HGET', KEYS[2], string.format('%d', o)) or '1')
      if seen >= limit then
        out[#out + 1] = -seen
      else
        out[#out + 1] = seen + 1
        rcall('HSET', KEYS[2], string.format('%d', o), seen + 1)
      end
    end
  end
end
if top ~= nxt or not mark then rcall('HSET', KEYS[2], 'next', string.format('%d', top)) end
if rcall('HLEN', KEYS[2]) > tonumber(sub[2] or '1024') then
  for _, field in ipairs(rcall('HKEYS', KEYS[2])) do
    local o = tonumber(field)
    if o and (o < cursor or rcall('ZSCORE', KEYS[3], field)) then rcall('HDEL', KEYS[2], field) end
  end
  rcall('HSET', KEYS[1], 'dsweep', string.format('%d', math.max(1024, 2 * rcall('HLEN', KEYS[2]))))
end
if not again then return {0, 1} end
return out
