--[[
  Create a user, or replace its password credentials (its tokens stay).
  KEYS[1] user     the user's hash: "scram-sha-256" / "scram-sha-512" -> credential, "created" -> ms,
                   "token:<id>" -> "<digest> <created ms>"
  KEYS[2] users    set of user names
  ARGV[1] name     the user's name
  ARGV[2] now      ms
  ARGV[3] sha256   the SCRAM-SHA-256 credential (salt, stored key, server key, iterations), "" for none
  ARGV[4] sha512   the SCRAM-SHA-512 credential, "" for none
  Returns 1 when the user was created, 0 when it existed.
]]
local rcall = redis.call

local created = rcall('HSETNX', KEYS[1], 'created', ARGV[2])
local mechanisms = {{'scram-sha-256', ARGV[3]}, {'scram-sha-512', ARGV[4]}}
for _, m in ipairs(mechanisms) do
  if m[2] == '' then
    rcall('HDEL', KEYS[1], m[1])
  else
    rcall('HSET', KEYS[1], m[1], m[2])
  end
end
rcall('SADD', KEYS[2], ARGV[1])
return created
