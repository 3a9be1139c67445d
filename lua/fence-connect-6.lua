--[[
  Connect with a transaction key: bump its epoch, fence the older epoch, abort its open transaction;
  or, for the incarnation that holds the key now, carry on in its epoch.
  KEYS[1] key      the transaction key's hash: epoch, pid, txn, inc (incarnation), last (the epoch a
                   Kafka producer held before its coordinator moved it on: txn-end-4), created, updated,
                   connected (when a connect last handed its epoch out, by Redis's clock)
  KEYS[2] index    set of every transaction key
  KEYS[3] oldtxn   the hash of the transaction the caller saw open on the key (any name if none)
  KEYS[4] open     the coordinator's sorted set of unfinished transactions
  KEYS[5] txnlog   the coordinator's transaction log
  KEYS[6] incs     the key's former incarnations: incarnation -> the epoch it held
  ARGV[1] name     the full key, "owner&key"
  ARGV[2] epoch    the epoch the caller was given last, -1 for a new task; the key's last epoch
                   carries on in the key's epoch while no transaction is open
                   (TransactionMetadata.prepareIncrementProducerEpoch: the producer had not seen the
                   move, or retries an InitProducerId whose answer it lost)
  ARGV[3] seen     the transaction id the caller saw open on the key, "" for none
  ARGV[4] now      epoch milliseconds
  ARGV[5] new_pid  a fresh producer id, used for a new key or when the epoch runs out
  ARGV[6] max_epoch the largest epoch before the producer id is rotated
  ARGV[7] inc      the caller's incarnation, "" for none: the key's current one resumes its epoch,
                   one that held the key before is a zombie
  ARGV[8] keep     "1": the presented epoch, when the current one, becomes the key's last (Kafka's
                   InitProducerId, KIP-360), kept while the producer id is; any other connect forgets it
  ARGV[9] arrived  when the caller's request reached its gateway (the deployment's clock, Redis's), ""
                   for none: a new producer's connect (epoch -1) that arrived before the key's epoch
                   was last handed out is one its producer gave up on and sent again, held up on its
                   way here; its bump would fence the producer that the resend answered (the soak's
                   cluster:625580613, InitProducerId held 5.7 s behind a slow link to Redis)
  Returns {0, epoch, pid, aborted txn id or ""}, or {code}: 13 a stale epoch (the caller is a zombie),
  24 the key's open transaction changed since the caller looked (look again and retry), {24, "",
  "late"} a connect that arrived before the current epoch was handed out (refused, retriably).
]]
--- @include "clock"
local rcall = redis.call
local cur = rcall('HMGET', KEYS[1], 'epoch', 'pid', 'txn', 'inc', 'last')
if ARGV[7] ~= '' and cur[1] then
  if cur[4] == ARGV[7] then return {0, tonumber(cur[1]), cur[2], ''} end
  if rcall('HEXISTS', KEYS[6], ARGV[7]) == 1 then return {13} end
end
local presented = tonumber(ARGV[2])
if presented == -1 and ARGV[9] ~= '' and cur[1] then
  local connected = rcall('HGET', KEYS[1], 'connected')
  if connected and tonumber(ARGV[9]) < tonumber(connected) then return {24, '', 'late'} end
end
if cur[1] and presented ~= -1 and (cur[5] or '') ~= '' and presented == tonumber(cur[5])
    and (cur[3] or '') == ARGV[3] and (ARGV[3] == '' or rcall('HGET', KEYS[3], 'state') ~= 'OPEN') then
  return {0, tonumber(cur[1]), cur[2], ''}
end
if cur[1] and presented ~= -1 and presented ~= tonumber(cur[1]) then return {13} end
if (cur[3] or '') ~= ARGV[3] then return {24} end

local epoch, pid = 0, ARGV[5]
if cur[1] then
  epoch = tonumber(cur[1]) + 1
  pid = cur[2]
  if epoch > tonumber(ARGV[6]) then epoch, pid = 0, ARGV[5] end
end

local aborted = ''
if ARGV[3] ~= '' then
  local state = rcall('HGET', KEYS[3], 'state')
  if state == 'OPEN' then
    -- the old epoch's transaction ends here; its markers carry the new epoch, fencing its writes
    rcall('HSET', KEYS[3], 'state', 'ABORTING', 'updated', ARGV[4], 'epoch', string.format('%d', epoch))
    rcall('ZADD', KEYS[4], 0, ARGV[3])
    rcall('XADD', KEYS[5], 'MAXLEN', '~', 100000, '*', 'op', 'UPDATE', 'txn', ARGV[3], 'state', 'ABORTING',
      'reason', 'fenced')
    aborted = ARGV[3]
  end
end
if not cur[1] then rcall('HSET', KEYS[1], 'created', ARGV[4]) end
if cur[4] and cur[4] ~= '' then rcall('HSET', KEYS[6], cur[4], cur[1]) end
local last = ''
if ARGV[8] == '1' and presented ~= -1 and pid == cur[2] then last = string.format('%d', presented) end
rcall('HSET', KEYS[1], 'epoch', string.format('%d', epoch), 'pid', pid, 'txn', '', 'inc', ARGV[7],
  'updated', ARGV[4], 'last', last, 'connected', string.format('%d', redis_now_ms()))
rcall('SADD', KEYS[2], ARGV[1])
return {0, epoch, pid, aborted}
