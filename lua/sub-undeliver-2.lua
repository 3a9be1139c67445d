--[[
  Take back the delivery sub-deliver-3 counted for offsets that were handed out but never reached
  a consumer (read for a share member whose response had no room for them, or that had gone), as
  the gateway stops dispatching their partition: the next gateway, or this one when it dispatches
  the partition again, reads them anew, and their delivery counts must not include a delivery that
  never happened (Kafka counts a delivery only when a fetch acquires the record). An offset below
  `next` with no count kept was delivered once: it is kept as 0, never delivered; a count kept is
  lowered by one.
  KEYS[1] sub      the subscription's hash (only whether it exists: a deleted one keeps no counts)
  KEYS[2] counts   hash of offset -> deliveries so far, and next (see sub-deliver-3)
  ARGV[1] offsets  space-separated offsets or first-last ranges, ascending
  Returns {0}.
]]
local rcall = redis.call

if rcall('EXISTS', KEYS[1]) == 0 then return {0} end
local nxt = tonumber(rcall('HGET', KEYS[2], 'next') or '0')
for first, last in string.gmatch(ARGV[1], '(%d+)%-?(%d*)') do
  first = tonumber(first)
  for o = first, math.min(tonumber(last) or first, nxt - 1) do
    local field = string.format('%d', o)
    local seen = tonumber(rcall('HGET', KEYS[2], field) or '1')
    if seen > 0 then rcall('HSET', KEYS[2], field, seen - 1) end
  end
end
return {0}
