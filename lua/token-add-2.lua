--[[
  Give a user a token; only its digest is kept.
  KEYS[1] user     the user's hash
  KEYS[2] tokens   hash: token digest -> user name
  ARGV[1] name     the user's name
  ARGV[2] id       the token's id, shown in listings and used to revoke it
  ARGV[3] digest   SHA-256 of the token, hex
  ARGV[4] now      ms
  Returns 1, or 0 when there is no such user.
]]
local rcall = redis.call

if rcall('EXISTS', KEYS[1]) == 0 then return 0 end
rcall('HSET', KEYS[1], 'token:' .. ARGV[2], ARGV[3] .. ' ' .. ARGV[4])
rcall('HSET', KEYS[2], ARGV[3], ARGV[1])
return 1
