--[[
  Add partitions or subscriptions to an open transaction, as it touches them.
  KEYS[1] txn      the transaction's hash
  KEYS[2] members  the transaction's set of partitions ("topic\0partition") or subscriptions
  KEYS[3] txnlog   the coordinator's transaction log
  ARGV[1] id       the transaction id
  ARGV[2] kind     "partition" or "subscription"
  ARGV[3] items    the members to add, separated by newlines
  ARGV[4] epoch    the producer epoch of the caller, -1 to skip the check
  ARGV[5] now      epoch milliseconds
  Returns {0, number newly added}, or {code}: 25 no such transaction, 22 not OPEN (with the state),
  23 fenced by a newer epoch.
]]
local rcall = redis.call
local t = rcall('HMGET', KEYS[1], 'state', 'epoch')
if not t[1] then return {25} end
if ARGV[4] ~= '-1' and tonumber(ARGV[4]) < tonumber(t[2]) then return {23} end
if t[1] ~= 'OPEN' then return {22, t[1]} end
local added = {}
for item in string.gmatch(ARGV[3], '[^\n]+') do
  if rcall('SADD', KEYS[2], item) == 1 then table.insert(added, item) end
end
if #added > 0 then
  rcall('HSET', KEYS[1], 'updated', ARGV[5])
  rcall('XADD', KEYS[3], 'MAXLEN', '~', 100000, '*', 'op', 'ADD_' .. string.upper(ARGV[2]), 'txn', ARGV[1],
    'items', table.concat(added, '\n'))
end
return {0, #added}
