--[[
  Forget a transaction key (admin): its hash and its name in the index of keys.
  KEYS[1] key      the transaction key's hash
  KEYS[2] index    set of every transaction key
  ARGV[1] name     the full key, "owner&key"
  Returns {0}.
]]
local rcall = redis.call
rcall('DEL', KEYS[1])
rcall('SREM', KEYS[2], ARGV[1])
return {0}
