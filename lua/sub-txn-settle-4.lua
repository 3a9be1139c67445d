--[[
  Settle a transaction's pending acks on one partition of a subscription: commit acks them (moving
  the cursor), abort releases them. Safe to repeat: a second run finds nothing of the transaction.
  KEYS[1] sub      the subscription's hash (cursor)
  KEYS[2] acks     sorted set of offsets acked individually at or above the cursor
  KEYS[3] meta     the partition's meta hash (start)
  KEYS[4] pending  offsets locked by transactions (see includes/pending.lua)
  ARGV[1] txn      the transaction id
  ARGV[2] commit   1 to ack, 0 to release
  Returns {0, cursor or -1 when the subscription is gone, cumulative upto or -1, offsets settled...}.
]]
local rcall = redis.call
--- @include "cursor"

local txn = ARGV[1]
local upto = -1
local offsets = {}
local all = rcall('HGETALL', KEYS[4])
for i = 1, #all, 2 do
  local f, v = all[i], all[i + 1]
  if f == 'c' then
    local ctxn, cupto = string.match(v, '^(%S+) (%d+)$')
    if ctxn == txn then
      upto = tonumber(cupto)
      rcall('HDEL', KEYS[4], 'c')
    end
  elseif v == txn then
    offsets[#offsets + 1] = f
    rcall('HDEL', KEYS[4], f)
  end
end
local cursor = rcall('HGET', KEYS[1], 'cursor')
if not cursor then return {0, -1, upto, unpack(offsets)} end
cursor = tonumber(cursor)
if ARGV[2] == '1' then
  if upto > cursor then cursor = upto end
  cursor = cursor_within_log(KEYS[3], cursor)
  for _, o in ipairs(offsets) do
    if tonumber(o) >= cursor then rcall('ZADD', KEYS[2], o, o) end
  end
  cursor = advance_cursor(KEYS[2], cursor)
  rcall('HSET', KEYS[1], 'cursor', fmt(cursor))
end
return {0, cursor, upto, unpack(offsets)}
