--[[
  Issue a delegation token, and forget the tokens already past their expiry (as Kafka's periodic
  expired-token removal does). Every key shares the {gw:dt} hash tag.
  KEYS[1] ids       set of token ids
  KEYS[2] hmacs     hash: SHA-256 of a token's HMAC (hex) -> token id
  ARGV[1] id        the new token's id
  ARGV[2] digest    SHA-256 of its HMAC, hex
  ARGV[3] owner     principal ("User:alice")
  ARGV[4] requester principal that asked for it
  ARGV[5] renewers  msgpack list of principals
  ARGV[6] issue     ms
  ARGV[7] max       ms
  ARGV[8] expiry    ms
  ARGV[9] now       ms
  Returns the number of expired tokens forgotten.
]]
local rcall = redis.call
local prefix = '{gw:dt}:token:'
local now = tonumber(ARGV[9])
local gone = 0

for _, id in ipairs(rcall('SMEMBERS', KEYS[1])) do
  local t = rcall('HMGET', prefix .. id, 'expiry', 'digest')
  if t[1] == false or tonumber(t[1]) < now then
    if t[2] then rcall('HDEL', KEYS[2], t[2]) end
    rcall('DEL', prefix .. id)
    rcall('SREM', KEYS[1], id)
    gone = gone + 1
  end
end
rcall('HSET', prefix .. ARGV[1], 'owner', ARGV[3], 'requester', ARGV[4], 'renewers', ARGV[5],
      'issue', ARGV[6], 'max', ARGV[7], 'expiry', ARGV[8], 'digest', ARGV[2])
rcall('SADD', KEYS[1], ARGV[1])
rcall('HSET', KEYS[2], ARGV[2], ARGV[1])
return gone
