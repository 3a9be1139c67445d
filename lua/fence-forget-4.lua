--[[
  Forget a transaction key (admin): its hash, its former incarnations, the index of transactions
  its group commits settle, and its name in the index of keys.
  KEYS[1] key      the transaction key's hash
  KEYS[2] index    set of every transaction key
  KEYS[3] incs     the key's former incarnations
  KEYS[4] children the transactions its group commits settle
  ARGV[1] name     the full key, "owner&key"
  Returns {0}.
]]
local rcall = redis.call
rcall('DEL', KEYS[1], KEYS[3], KEYS[4])
rcall('SREM', KEYS[2], ARGV[1])
return {0}
