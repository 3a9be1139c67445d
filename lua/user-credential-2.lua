--[[
  Set or remove one SCRAM credential of a user (Kafka's AlterUserScramCredentials); setting one
  creates the user, removing one leaves the user, its other credential and its tokens.
  KEYS[1] user        the user's hash: "scram-sha-256" / "scram-sha-512" -> credential, "created" -> ms
  KEYS[2] users       set of user names
  ARGV[1] name        the user's name
  ARGV[2] now         ms
  ARGV[3] field       "scram-sha-256" or "scram-sha-512"
  ARGV[4] credential  the credential (salt, stored key, server key, iterations), "" to remove it
  Returns 1 when the credential was set, or removed having existed; 0 when there was none to remove.
]]
local rcall = redis.call

if ARGV[4] == '' then
  return rcall('HDEL', KEYS[1], ARGV[3])
end
rcall('HSETNX', KEYS[1], 'created', ARGV[2])
rcall('HSET', KEYS[1], ARGV[3], ARGV[4])
rcall('SADD', KEYS[2], ARGV[1])
return 1
