-- Helpers over a subscription's position: `cursor` (every offset below it acked) and a sorted set
-- of offsets acked individually at or above it (member and score = the offset).

local function fmt(n)
  return string.format('%d', n)
end

-- Drop acks below `cursor`, then absorb the contiguous run of acks starting at it; the new cursor.
local function advance_cursor(acks, cursor)
  redis.call('ZREMRANGEBYSCORE', acks, '-inf', '(' .. fmt(cursor))
  while true do
    local run = redis.call('ZRANGE', acks, 0, 511, 'WITHSCORES')
    local moved = 0
    for i = 2, #run, 2 do
      if tonumber(run[i]) ~= cursor then break end
      cursor = cursor + 1
      moved = moved + 1
    end
    if moved == 0 then return cursor end
    redis.call('ZREMRANGEBYSCORE', acks, '-inf', '(' .. fmt(cursor))
    if moved < #run / 2 then return cursor end
  end
end

-- The cursor lifted to the log start: offsets retention removed count as acked.
local function cursor_within_log(meta, cursor)
  local start = tonumber(redis.call('HGET', meta, 'start') or '0')
  if cursor < start then return start end
  return cursor
end
