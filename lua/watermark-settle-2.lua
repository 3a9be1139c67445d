--[[
  Settle a transaction's watermark markers on one partition once its marker is written: on commit
  they count from now on without asking the transaction, on abort they are dropped. Safe to repeat.
  KEYS[1] marks    the partition's watermark markers (see includes/watermark.lua)
  KEYS[2] wtxns    transaction id -> offsets of its markers here
  ARGV[1] txn      the transaction id
  ARGV[2] commit   1 to commit, 0 to abort
  Returns {0, markers settled}.
]]
local rcall = redis.call

local offsets = rcall('HGET', KEYS[2], ARGV[1])
if not offsets then return {0, 0} end
local n = 0
for o in string.gmatch(offsets, '%d+') do
  local found = rcall('ZRANGEBYSCORE', KEYS[1], o, o)
  if #found > 0 then
    local m = found[1]
    rcall('ZREM', KEYS[1], m)
    if ARGV[2] == '1' then
      local a = string.find(m, ' ', 1, true)
      local b = string.find(m, ' ', a + 1, true)
      rcall('ZADD', KEYS[1], o, string.sub(m, 1, a) .. '-' .. string.sub(m, b))
    end
    n = n + 1
  end
end
rcall('HDEL', KEYS[2], ARGV[1])
return {0, n}
