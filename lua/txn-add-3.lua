--[[
  Add partitions or subscriptions to an open transaction, as it touches them.
  KEYS[1] txn      the transaction's hash
  KEYS[2] members  the transaction's set of partitions ("topic\0partition"), subscriptions, or
                   what its end settles besides markers ("kind\0topic\0partition")
  KEYS[3] txnlog   the coordinator's transaction log
  ARGV[1] id       the transaction id
  ARGV[2] kind     "partition", "subscription" or "settle"
  ARGV[3] items    the members to add, separated by newlines
  ARGV[4] epoch    the producer epoch of the caller, -1 to skip the check
  ARGV[5] now      epoch milliseconds
  Returns {0, number newly added}, or {code}: 25 no such transaction, 22 not OPEN (with the state),
  23 fenced by a newer epoch.
]]
local rcall = redis.call
--- @include "txn"

local t = rcall('HMGET', KEYS[1], 'state', 'epoch')
if not t[1] then return {25} end
if ARGV[4] ~= '-1' and tonumber(ARGV[4]) < tonumber(t[2]) then return {23} end
if t[1] ~= 'OPEN' then return {22, t[1]} end
return {0, add_members(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[5])}
