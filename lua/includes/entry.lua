-- Helpers over one partition log: entry IDs are "<base offset>-1", fields alternate name, value.

local function entry_id(offset)
  return string.format('%d-1', offset)
end

-- Readers on other gateways that wait for a log to grow raise the flag `<log>:wake` (same slot)
-- and listen on the shard channel named after the log: the first write after the flag publishes
-- once and lowers it. Without a flag a write costs one DEL of a missing key.
local function wake_readers(log)
  if redis.call('DEL', log .. ':wake') == 1 then redis.call('SPUBLISH', log, '') end
end

-- Write a batch at the high watermark `hw` and advance the meta hash; the one way a batch enters
-- a log. `maxts` and `bytes` are the meta's before it. Returns hw, maxts and bytes after it.
local function append_entry(log, meta, hw, maxts, bytes, batch, count, batch_max_ts)
  maxts = math.max(maxts, tonumber(batch_max_ts))
  redis.call('XADD', log, entry_id(hw), 'b', batch, 'n', count, 't', string.format('%d', maxts),
    'c', string.format('%d', bytes))
  hw, bytes = hw + tonumber(count), bytes + #batch
  redis.call('HSET', meta, 'hw', string.format('%d', hw), 'maxts', string.format('%d', maxts),
    'bytes', string.format('%d', bytes))
  wake_readers(log)
  return hw, maxts, bytes
end

local function entry_fields(entry)
  local f = {}
  local kv = entry[2]
  for i = 1, #kv, 2 do f[kv[i]] = kv[i + 1] end
  return f
end

-- The entry holding `offset` (or the last one before it): base offset, count, fields; nil if none.
local function entry_at(log, offset)
  local r = redis.call('XREVRANGE', log, entry_id(offset), '-', 'COUNT', 1)
  if #r == 0 then return nil end
  local base = tonumber(string.match(r[1][1], '^(%d+)-'))
  local f = entry_fields(r[1])
  return base, tonumber(f['n']), f
end

-- The base offset of the first entry in [lo, hi) for which pred(fields) holds, or hi.
-- pred must be monotone over the log (false ... false true ... true); lo must be an entry base.
local function first_entry_where(log, lo, hi, pred)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local base, n, f = entry_at(log, mid)
    if base == nil or base < lo then
      base, n, f = entry_at(log, lo)
      if base == nil then return hi end
    end
    if pred(f) then hi = base else lo = base + n end
  end
  return lo
end
