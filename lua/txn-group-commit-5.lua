--[[
  Commit several transactions at one point of no return: all OPEN ones become COMMITTING together,
  or nothing changes. With a transaction key, the caller's epoch must be the key's, and a commit id
  at or below the key's last one is a duplicate (a retried commit): its OPEN transactions become
  ABORTING instead, and the others are left as they are. Either way, the key's other transactions
  meant for this commit id or an earlier one (left by tasks that died) become ABORTING.
  KEYS[1] key      the transaction key's hash (any name without a key): epoch, commit (last commit id)
  KEYS[2] open     sorted set of unfinished transactions by deadline (0: due for roll-forward)
  KEYS[3] txnlog   the coordinator's transaction log
  KEYS[4] prefix   what every transaction's hash name starts with: the hash of id X is <prefix>X
  KEYS[5] children the key's group members by commit id (txn-new-4), any name without a key
  ARGV[1] ids      the transaction ids, separated by newlines
  ARGV[2] epoch    the caller's epoch of the key, -1 without a key
  ARGV[3] commit   the commit id, "" for none
  ARGV[4] now      epoch milliseconds
  Returns {0, duplicate (0 or 1), {state of each transaction, in order}, {ids of the orphans aborted}},
  the states to roll forward;
  or {code, id, state}: 23 a stale epoch, 25 no such transaction, 22 a transaction not OPEN, 5 a
  transaction of a transaction key (those end through their key).
]]
local rcall = redis.call
local ids = {}
for id in string.gmatch(ARGV[1], '[^\n]+') do table.insert(ids, id) end

local duplicate = 0
if ARGV[2] ~= '-1' then
  local key = rcall('HMGET', KEYS[1], 'epoch', 'commit')
  if not key[1] or tonumber(key[1]) ~= tonumber(ARGV[2]) then return {23, '', ''} end
  if ARGV[3] ~= '' and key[2] and tonumber(ARGV[3]) <= tonumber(key[2]) then duplicate = 1 end
end

local states = {}
for i, id in ipairs(ids) do
  local t = rcall('HMGET', KEYS[4] .. id, 'state', 'owner')
  if not t[1] then return {25, id, ''} end
  if t[2] and t[2] ~= '' then return {5, id, t[1]} end
  if duplicate == 0 and t[1] ~= 'OPEN' then return {22, id, t[1]} end
  states[i] = t[1]
end

local function decide(id, state)
  rcall('HSET', KEYS[4] .. id, 'state', state, 'updated', ARGV[4])
  rcall('ZADD', KEYS[2], 0, id)
  rcall('XADD', KEYS[3], 'MAXLEN', '~', 100000, '*', 'op', 'UPDATE', 'txn', id, 'state', state,
    'group', ARGV[3])
end

local target = duplicate == 1 and 'ABORTING' or 'COMMITTING'
for i, id in ipairs(ids) do
  if states[i] == 'OPEN' then
    states[i] = target
    decide(id, target)
  end
end
local orphans = {}
if ARGV[3] ~= '' and ARGV[2] ~= '-1' then
  if duplicate == 0 then rcall('HSET', KEYS[1], 'commit', ARGV[3], 'updated', ARGV[4]) end
  for _, id in ipairs(ids) do rcall('ZREM', KEYS[5], id) end
  for _, id in ipairs(rcall('ZRANGEBYSCORE', KEYS[5], '-inf', ARGV[3])) do
    if rcall('HGET', KEYS[4] .. id, 'state') == 'OPEN' then
      decide(id, 'ABORTING')
      table.insert(orphans, id)
    end
    rcall('ZREM', KEYS[5], id)
  end
end
return {0, duplicate, states, orphans}
