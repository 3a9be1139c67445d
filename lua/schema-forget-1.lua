--[[
  Forget a subject's version counter once the subject is deleted for good, so that it starts
  again at version 1 as the Confluent registry's does.
  KEYS[1] versions hash: "<subject>" -> the last version handed out in that subject
  ARGV[1] subject  the subject deleted for good
  Returns 0.
]]
local rcall = redis.call
rcall('HDEL', KEYS[1], ARGV[1])
return 0
