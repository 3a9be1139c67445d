-- Helpers of the transaction coordinator's scripts (every key in the {gw:txn} slot).

-- Open transaction `id` (hash `txn`) for producer `pid` at `epoch`, owned by `owner`: its hash, its
-- deadline in the set of unfinished transactions `open`, and a NEW entry in the log `txnlog`. It is
-- `marked`: what its end settles besides markers is recorded as it is added (txn-add-3 "settle").
local function open_txn(txn, open, txnlog, id, timeout, now, pid, epoch, owner)
  redis.call('HSET', txn, 'state', 'OPEN', 'timeout', timeout, 'start', now, 'updated', now,
    'pid', pid, 'epoch', epoch, 'owner', owner, 'marked', 1)
  redis.call('ZADD', open, string.format('%d', tonumber(now) + tonumber(timeout)), id)
  redis.call('XADD', txnlog, 'MAXLEN', '~', 100000, '*', 'op', 'NEW', 'txn', id, 'state', 'OPEN',
    'timeout', timeout, 'pid', pid, 'epoch', epoch, 'owner', owner)
end

-- Add the newline-separated `items` of `kind` to the set `members` of open transaction `id`; the
-- new ones are logged. Returns how many were new.
local function add_members(txn, members, txnlog, id, kind, items, now)
  local added = {}
  for item in string.gmatch(items, '[^\n]+') do
    if redis.call('SADD', members, item) == 1 then table.insert(added, item) end
  end
  if #added > 0 then
    redis.call('HSET', txn, 'updated', now)
    redis.call('XADD', txnlog, 'MAXLEN', '~', 100000, '*', 'op', 'ADD_' .. string.upper(kind), 'txn', id,
      'items', table.concat(added, '\n'))
  end
  return #added
end

-- A transactional producer's check against its transaction key's hash fields `k` (epoch, pid, ...):
-- nil when `pid` at `epoch` is the key's current producer, else the refusal {13, why, key's epoch},
-- why being "unknown" (no such key), "pid" (another producer id), "fenced" (an older epoch) or
-- "future" (an epoch never handed out).
local function refuse_producer(k, pid, epoch)
  if not k[1] then return {13, 'unknown', -1} end
  if k[2] ~= pid then return {13, 'pid', tonumber(k[1])} end
  if tonumber(epoch) < tonumber(k[1]) then return {13, 'fenced', tonumber(k[1])} end
  if tonumber(epoch) > tonumber(k[1]) then return {13, 'future', tonumber(k[1])} end
  return nil
end
