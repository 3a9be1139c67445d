-- Helpers over a subscription's pending acks (PIP-31's PENDING_ACK): a hash per partition and
-- subscription, offset -> the transaction that locked it, plus field 'c' = "txn upto" for the one
-- pending cumulative ack (every offset below upto).

-- The transaction holding `offset` other than `txn` ('' for a plain ack), or nil.
local function pending_holder(pending, offset, txn)
  local h = redis.call('HGET', pending, string.format('%d', offset))
  if h and h ~= txn then return h end
  local c = redis.call('HGET', pending, 'c')
  if c then
    local ctxn, cupto = string.match(c, '^(%S+) (%d+)$')
    if ctxn ~= txn and offset < tonumber(cupto) then return ctxn end
  end
  return nil
end

-- The transaction other than `txn` holding any offset below `upto`, or nil.
local function pending_below(pending, upto, txn)
  local all = redis.call('HGETALL', pending)
  for i = 1, #all, 2 do
    local f, v = all[i], all[i + 1]
    if f == 'c' then
      local ctxn = string.match(v, '^(%S+) ')
      if ctxn ~= txn then return ctxn end
    elseif v ~= txn and tonumber(f) < upto then
      return v
    end
  end
  return nil
end
