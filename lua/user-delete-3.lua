--[[
  Delete a user: its credentials, its tokens, its name.
  KEYS[1] user     the user's hash (fields "token:<id>" -> "<digest> <created ms>")
  KEYS[2] users    set of user names
  KEYS[3] tokens   hash: token digest -> user name
  ARGV[1] name     the user's name
  Returns 1 when the user existed, 0 when it did not.
]]
local rcall = redis.call

local fields = rcall('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  if string.sub(fields[i], 1, 6) == 'token:' then
    rcall('HDEL', KEYS[3], string.match(fields[i + 1], '^(%S+)'))
  end
end
rcall('DEL', KEYS[1])
return rcall('SREM', KEYS[2], ARGV[1])
