--[[
  Lock offsets of one partition for a transaction (PENDING_ACK): acked when it commits, released
  when it aborts (sub-txn-settle-4). Offsets acked already or held by another transaction conflict.
  KEYS[1] sub      the subscription's hash (cursor)
  KEYS[2] acks     sorted set of offsets acked individually at or above the cursor
  KEYS[3] meta     the partition's meta hash (start)
  KEYS[4] pending  offsets locked by transactions (see includes/pending.lua)
  ARGV[1] txn      the transaction id
  ARGV[2] upto     cumulative: lock every offset below this; -1 for none
  ARGV[3] offsets  offsets locked individually, space-separated (may be empty)
  Returns {0} (nothing changes on any error), {15} when the subscription does not exist,
  {20, holder} on a conflict: holder is the other transaction, or '' when an offset is acked already.
]]
local rcall = redis.call
--- @include "cursor"
--- @include "pending"

local cursor = rcall('HGET', KEYS[1], 'cursor')
if not cursor then return {15} end
cursor = cursor_within_log(KEYS[3], tonumber(cursor))
local txn = ARGV[1]
local upto = tonumber(ARGV[2])
local new_upto = nil
if upto >= 0 then
  local c = rcall('HGET', KEYS[4], 'c')
  local mine = 0
  if c then
    local ctxn, cupto = string.match(c, '^(%S+) (%d+)$')
    if ctxn == txn then mine = tonumber(cupto) end
  end
  if upto > mine then
    if upto <= cursor then return {20, ''} end
    local h = pending_below(KEYS[4], upto, txn)
    if h then return {20, h} end
    new_upto = upto
  end
end
local locks = {}
for o in string.gmatch(ARGV[3], '%d+') do
  local n = tonumber(o)
  if n < cursor or rcall('ZSCORE', KEYS[2], o) then return {20, ''} end
  local h = pending_holder(KEYS[4], n, txn)
  if h then return {20, h} end
  locks[#locks + 1] = o
  locks[#locks + 1] = txn
end
if new_upto then rcall('HSET', KEYS[4], 'c', txn .. ' ' .. fmt(new_upto)) end
if #locks > 0 then rcall('HSET', KEYS[4], unpack(locks)) end
return {0}
