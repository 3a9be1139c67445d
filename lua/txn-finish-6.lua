--[[
  Record that every marker is written: COMMITTING becomes COMMITTED, ABORTING becomes ABORTED.
  KEYS[1] txn      the transaction's hash
  KEYS[2] open     sorted set of unfinished transactions
  KEYS[3] txnlog   the coordinator's transaction log
  KEYS[4] parts    the transaction's partitions
  KEYS[5] subs     the transaction's subscriptions
  KEYS[6] settles  what its end settles on its partitions besides markers
  ARGV[1] id       the transaction id
  ARGV[2] now      epoch milliseconds
  ARGV[3] keep_ms  how long a finished transaction stays describable (and a retried end harmless)
  Returns {0, final state}, or {25} when there is no such transaction.
]]
local rcall = redis.call
local state = rcall('HGET', KEYS[1], 'state')
if not state then return {25} end
if state == 'COMMITTING' then state = 'COMMITTED' elseif state == 'ABORTING' then state = 'ABORTED' else
  return {0, state}
end
rcall('HSET', KEYS[1], 'state', state, 'updated', ARGV[2])
rcall('ZREM', KEYS[2], ARGV[1])
rcall('XADD', KEYS[3], 'MAXLEN', '~', 100000, '*', 'op', 'UPDATE', 'txn', ARGV[1], 'state', state)
for _, k in ipairs({KEYS[1], KEYS[4], KEYS[5], KEYS[6]}) do rcall('PEXPIRE', k, ARGV[3]) end
return {0, state}
