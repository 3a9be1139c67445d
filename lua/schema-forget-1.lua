--[[
  Forget a subject's versions once the subject is deleted for good, so that it starts again at
  version 1 as the Confluent registry's does.
  KEYS[1] versions     hash: "n:<subject>" -> the last version handed out in the subject,
                       "f:<fingerprint>:<subject>" -> the version last handed out to that schema there
  ARGV[1] subject      the subject deleted for good
  ARGV[2] fingerprints the fingerprints of the schemas it held, space-separated
  Returns 0.
]]
local rcall = redis.call
rcall('HDEL', KEYS[1], 'n:' .. ARGV[1])
for fp in string.gmatch(ARGV[2], '%S+') do
  rcall('HDEL', KEYS[1], 'f:' .. fp .. ':' .. ARGV[1])
end
return 0
