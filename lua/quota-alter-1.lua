--[[
  Apply the client quota alterations of one AlterClientQuotas request, all at once (Kafka's
  ClientQuotaControlManager writes them as one atomic batch of records).
  KEYS[1] quotas   hash: msgpack entity -> msgpack map quota key -> value (a decimal string)
  ARGV[1] changes  msgpack list of {entity, {{key, value}, ...}}: value "" removes the key
  Returns the number of entities whose quotas were written.
]]
local rcall = redis.call
local changes = cmsgpack.unpack(ARGV[1])
for _, change in ipairs(changes) do
  local entity, ops = change[1], change[2]
  local raw = rcall('HGET', KEYS[1], entity)
  local quotas = {}
  if raw then quotas = cmsgpack.unpack(raw) end
  for _, op in ipairs(ops) do
    if op[2] == '' then quotas[op[1]] = nil else quotas[op[1]] = op[2] end
  end
  if next(quotas) == nil then
    rcall('HDEL', KEYS[1], entity)
  else
    rcall('HSET', KEYS[1], entity, cmsgpack.pack(quotas))
  end
end
return #changes
