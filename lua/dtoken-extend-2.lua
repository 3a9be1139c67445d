--[[
  Renew or expire the delegation token an HMAC names, as Kafka's DelegationTokenControlManager does:
  not found, then expired (past its expiry or its max), then owner mismatch (only the owner or a
  renewer may), then the new expiry is now + lifetime capped at the token's max; a negative
  lifetime removes the token at once, answering now as Kafka 4.4 does.
  KEYS[1] ids        set of token ids
  KEYS[2] hmacs      hash: SHA-256 of a token's HMAC (hex) -> token id
  ARGV[1] digest     SHA-256 of the HMAC given, hex
  ARGV[2] principal  who asks ("User:alice")
  ARGV[3] now        ms
  ARGV[4] lifetime   ms from now; negative: remove the token
  Returns {'ok', expiry ms (now when removed)}, or {'not-found'}, {'expired'},
  {'owner-mismatch'}.
]]
local rcall = redis.call

local id = rcall('HGET', KEYS[2], ARGV[1])
if not id then return {'not-found'} end
local key = '{gw:dt}:token:' .. id
local t = rcall('HMGET', key, 'owner', 'renewers', 'max', 'expiry')
if not t[1] then return {'not-found'} end
local now = tonumber(ARGV[3])
local max = tonumber(t[3])
if max < now or tonumber(t[4]) < now then return {'expired'} end
local allowed = t[1] == ARGV[2]
for _, renewer in ipairs(cmsgpack.unpack(t[2])) do
  if renewer == ARGV[2] then allowed = true end
end
if not allowed then return {'owner-mismatch'} end
local lifetime = tonumber(ARGV[4])
if lifetime < 0 then
  rcall('DEL', key)
  rcall('SREM', KEYS[1], id)
  rcall('HDEL', KEYS[2], ARGV[1])
  return {'ok', ARGV[3]}
end
local expiry = math.min(max, now + lifetime)
rcall('HSET', key, 'expiry', string.format('%d', expiry))
return {'ok', string.format('%d', expiry)}
