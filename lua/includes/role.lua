-- A background role's writes carry the epoch of its lease (-1: not a role's write). A partition
-- keeps the highest epoch it has seen in `field` of a hash of its own and refuses older ones, so a
-- holder paused past its lease cannot act on a partition its successor has touched (as Kafka's
-- leader epoch fences a deposed leader).
local function role_stale(hash, field, epoch)
  if epoch < 0 then return false end
  local seen = tonumber(redis.call('HGET', hash, field) or '-1')
  if epoch < seen then return true end
  if epoch > seen then redis.call('HSET', hash, field, string.format('%d', epoch)) end
  return false
end
