--[[
  Revoke one of a user's tokens.
  KEYS[1] user     the user's hash
  KEYS[2] tokens   hash: token digest -> user name
  ARGV[1] id       the token's id
  Returns 1 when the token existed, 0 when it did not.
]]
local rcall = redis.call

local value = rcall('HGET', KEYS[1], 'token:' .. ARGV[1])
if not value then return 0 end
rcall('HDEL', KEYS[2], string.match(value, '^(%S+)'))
rcall('HDEL', KEYS[1], 'token:' .. ARGV[1])
return 1
