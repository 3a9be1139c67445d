-- The delayed-message index of one partition (PIP-195 buckets). Messages wait in the `held` stream
-- (entry "<seq>-1", fields b, n, t as in the log); `seq` numbers them in produce order. The open
-- bucket is a sorted set (score = delivery time, member = seq as 8 big-endian bytes, so ties sort in
-- produce order); a sealed bucket is a hash (n left, seg, pos, per, nseg) over segment strings of
-- 16-byte (delivery time, seq) entries in order; `buckets` scores each sealed bucket by its head.
-- The dmeta hash holds seq, n (messages waiting), since (arrival of the open bucket's first) and bid.
-- K = {log, meta, dmeta, held, open, buckets}; C = {bucket_max, span, seg, max_buckets}.

local DL_ENTRY = 16
local DL_CHUNK = 64

local function dl_num(n)
  return string.format('%d', n)
end

local function dl_bucket_key(K, id)
  return K.buckets .. ':' .. id
end

-- Write `flat` ({t1, s1, t2, s2, ...}, in order) as sealed bucket `id`.
local function dl_write_bucket(K, C, id, flat)
  local key = dl_bucket_key(K, id)
  local n = #flat / 2
  local nseg = 0
  local parts = {}
  for i = 1, #flat, 2 do
    parts[#parts + 1] = struct.pack('>i8i8', flat[i], flat[i + 1])
    if #parts == C.seg or i + 1 == #flat then
      redis.call('SET', key .. ':' .. nseg, table.concat(parts))
      nseg = nseg + 1
      parts = {}
    end
  end
  redis.call('HSET', key, 'n', n, 'seg', 0, 'pos', 0, 'per', C.seg, 'nseg', nseg)
  redis.call('ZADD', K.buckets, flat[1], id)
end

-- A sealed bucket as a cursor: head() gives its next (time, seq) or nil, pop() consumes it.
local function dl_bucket(K, id)
  local key = dl_bucket_key(K, id)
  local h = redis.call('HMGET', key, 'n', 'seg', 'pos', 'per', 'nseg')
  local b = {id = id, key = key, n = tonumber(h[1]), seg = tonumber(h[2]), pos = tonumber(h[3]),
             per = tonumber(h[4]), nseg = tonumber(h[5]), buf = '', bi = 1}
  function b.head()
    if b.n <= 0 then return nil end
    if b.bi > #b.buf then
      if b.pos >= b.per then
        redis.call('DEL', b.key .. ':' .. b.seg)
        b.seg, b.pos = b.seg + 1, 0
      end
      b.buf = redis.call('GETRANGE', b.key .. ':' .. b.seg, b.pos * DL_ENTRY, (b.pos + DL_CHUNK) * DL_ENTRY - 1)
      b.bi = 1
    end
    local t, s = struct.unpack('>i8i8', b.buf, b.bi)
    return t, s
  end
  function b.pop()
    b.bi, b.pos, b.n = b.bi + DL_ENTRY, b.pos + 1, b.n - 1
  end
  -- Persist the cursor and the bucket's due time; an emptied bucket is deleted.
  function b.save()
    if b.n <= 0 then
      for i = b.seg, b.nseg - 1 do redis.call('DEL', b.key .. ':' .. i) end
      redis.call('DEL', b.key)
      redis.call('ZREM', K.buckets, b.id)
      return
    end
    local t = b.head()
    redis.call('HSET', b.key, 'n', b.n, 'seg', b.seg, 'pos', b.pos)
    redis.call('ZADD', K.buckets, t, b.id)
  end
  return b
end

-- Everything left in a bucket, as a flat list; the bucket is deleted.
local function dl_drain(K, id)
  local b = dl_bucket(K, id)
  local flat = {}
  while true do
    local t, s = b.head()
    if t == nil then break end
    flat[#flat + 1], flat[#flat + 2] = t, s
    b.pop()
  end
  b.save()
  return flat
end

-- Over the bucket cap: merge-sort the two adjacent buckets (in arrival order) with the fewest messages.
local function dl_cap(K, C)
  while redis.call('ZCARD', K.buckets) > C.max_buckets do
    local ids = redis.call('ZRANGE', K.buckets, 0, -1)
    for i = 1, #ids do ids[i] = tonumber(ids[i]) end
    table.sort(ids)
    local sizes = {}
    for i = 1, #ids do sizes[i] = tonumber(redis.call('HGET', dl_bucket_key(K, ids[i]), 'n')) end
    local best = 1
    for i = 2, #ids - 1 do
      if sizes[i] + sizes[i + 1] < sizes[best] + sizes[best + 1] then best = i end
    end
    local a, b = dl_drain(K, ids[best]), dl_drain(K, ids[best + 1])
    local flat, i, j = {}, 1, 1
    while i <= #a or j <= #b do
      local take_a = j > #b or (i <= #a and (a[i] < b[j] or (a[i] == b[j] and a[i + 1] < b[j + 1])))
      if take_a then
        flat[#flat + 1], flat[#flat + 2] = a[i], a[i + 1]
        i = i + 2
      else
        flat[#flat + 1], flat[#flat + 2] = b[j], b[j + 1]
        j = j + 2
      end
    end
    dl_write_bucket(K, C, ids[best], flat)
  end
end

-- Turn the open bucket into a sealed one.
local function dl_seal(K, C)
  local z = redis.call('ZRANGE', K.open, 0, -1, 'WITHSCORES')
  if #z == 0 then return end
  local flat = {}
  for i = 1, #z, 2 do
    flat[#flat + 1], flat[#flat + 2] = tonumber(z[i + 1]), struct.unpack('>I8', z[i])
  end
  dl_write_bucket(K, C, redis.call('HINCRBY', K.dmeta, 'bid', 1), flat)
  redis.call('DEL', K.open)
  dl_cap(K, C)
end

-- Seal the open bucket when it is full or has been open for its time span.
local function dl_maybe_seal(K, C, now)
  local n = redis.call('ZCARD', K.open)
  if n == 0 then return end
  local since = tonumber(redis.call('HGET', K.dmeta, 'since') or now)
  if n >= C.bucket_max or now - since >= C.span then dl_seal(K, C) end
end

-- The earliest delivery time waiting, or -1.
local function dl_next_due(K)
  local o = redis.call('ZRANGE', K.open, 0, 0, 'WITHSCORES')
  local b = redis.call('ZRANGE', K.buckets, 0, 0, 'WITHSCORES')
  local t = -1
  if #o > 0 then t = tonumber(o[2]) end
  if #b > 0 and (t < 0 or tonumber(b[2]) < t) then t = tonumber(b[2]) end
  return t
end

-- Schedule messages ({{at, batch, count, max_ts}, ...}) or append those already due to the log.
-- The partition's log takes delayed messages in delivery-time order: the items are taken by
-- delivery time (ties in the order given), and one already due is appended at once only while
-- nothing due no later than it still waits; else it waits behind those, and the scheduler, which
-- moves in delivery-time order, delivers it after them.
-- Returns how many were held and the earliest delivery time among them (-1 if none).
local function dl_schedule(K, C, now, items)
  local meta = redis.call('HMGET', K.meta, 'hw', 'maxts', 'bytes')
  if not meta[1] then return nil end
  local hw, maxts, bytes = tonumber(meta[1]), tonumber(meta[2] or '-1'), tonumber(meta[3] or '0')
  local held, first = 0, -1
  for i, it in ipairs(items) do it[5] = i end
  table.sort(items, function(a, b) return a[1] < b[1] or (a[1] == b[1] and a[5] < b[5]) end)
  local waiting = dl_next_due(K)
  for _, it in ipairs(items) do
    local at, batch, count, batch_max_ts = it[1], it[2], it[3], it[4]
    if at <= now and (waiting < 0 or at < waiting) then
      hw, maxts, bytes = append_entry(K.log, K.meta, hw, maxts, bytes, batch, count, batch_max_ts)
    else
      dl_maybe_seal(K, C, now)
      local seq = redis.call('HINCRBY', K.dmeta, 'seq', 1)
      redis.call('XADD', K.held, dl_num(seq) .. '-1', 'b', batch, 'n', count, 't', dl_num(batch_max_ts))
      if redis.call('ZADD', K.open, at, struct.pack('>I8', seq)) == 1 and redis.call('ZCARD', K.open) == 1 then
        redis.call('HSET', K.dmeta, 'since', dl_num(now))
      end
      redis.call('HINCRBY', K.dmeta, 'n', 1)
      held = held + 1
      if first < 0 or at < first then first = at end
      if waiting < 0 or at < waiting then waiting = at end
    end
  end
  dl_maybe_seal(K, C, now)
  return held, first
end
