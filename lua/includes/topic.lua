-- The topic registry: one hash, topic name -> msgpack record {p, n, c, t, id, g, v} (see
-- gateway/store/log.py). `g` numbers the topic's incarnation and `v` each change of its record,
-- both from one counter, so neither number ever comes back.

-- The record of `name`, decoded, and as stored; nil when there is none.
local function topic_get(topics, name)
  local raw = redis.call('HGET', topics, name)
  if not raw then return nil, nil end
  return cmsgpack.unpack(raw), raw
end

-- Store `rec` as a new version of the record of `name`; returns it as stored.
local function topic_put(topics, seq, name, rec)
  rec['v'] = redis.call('INCR', seq)
  local raw = cmsgpack.pack(rec)
  redis.call('HSET', topics, name, raw)
  return raw
end

-- The incarnation a record or a partition's meta hash belongs to; 0 for those made before
-- incarnations were numbered.
local function incarnation(value)
  return tonumber(value or '0')
end
