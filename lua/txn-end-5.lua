--[[
  The point of no return: OPEN becomes COMMITTING or ABORTING, durably, before any marker is written.
  KEYS[1] txn      the transaction's hash
  KEYS[2] open     sorted set of unfinished transactions by deadline
  KEYS[3] txnlog   the coordinator's transaction log
  KEYS[4] parts    the transaction's partitions
  KEYS[5] subs     the transaction's subscriptions
  ARGV[1] id       the transaction id
  ARGV[2] action   "commit" or "abort"
  ARGV[3] epoch    the caller's producer epoch, -1 to skip the check
  ARGV[4] now      epoch milliseconds
  Returns {0, state, pid, epoch, partitions, subscriptions} where state is the one to roll forward
  (a repeated request for the same outcome answers the same way); {code} on error: 25 no such
  transaction, 22 the other outcome was decided already (with the state), 23 fenced by a newer epoch.
]]
local rcall = redis.call
local t = rcall('HMGET', KEYS[1], 'state', 'epoch', 'pid')
if not t[1] then return {25} end
if ARGV[3] ~= '-1' and tonumber(ARGV[3]) < tonumber(t[2]) then return {23} end
local want = (ARGV[2] == 'commit') and 'COMMITTING' or 'ABORTING'
local done = (ARGV[2] == 'commit') and 'COMMITTED' or 'ABORTED'
local state = t[1]
if state == 'OPEN' then
  state = want
  rcall('HSET', KEYS[1], 'state', state, 'updated', ARGV[4])
  rcall('ZADD', KEYS[2], 0, ARGV[1])
  rcall('XADD', KEYS[3], 'MAXLEN', '~', 100000, '*', 'op', 'UPDATE', 'txn', ARGV[1], 'state', state)
elseif state ~= want and state ~= done then
  return {22, state}
end
return {0, state, t[3], t[2], rcall('SMEMBERS', KEYS[4]), rcall('SMEMBERS', KEYS[5])}
