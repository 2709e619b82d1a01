-- append_record(stream, dropped, max, id, entry, extra): the durable record. Append one entry (``id``: its unique
-- key in PostgreSQL, so a replayed export changes nothing; ``entry``: the msgpack record; ``extra``: what only the
-- script knows, e.g. a delivered reply's provider message ids) to the stream of the conversation's slot. Bounded:
-- at ``max`` entries the oldest go and are counted in ``dropped`` (the exporter is down or behind; ops see the
-- count). ``max`` 0 or an empty entry: the record is off (no database configured), nothing is written.
-- Returns the entry's stream id (nil when off).
local function append_record(stream, dropped, max, id, entry, extra)
  max = tonumber(max or '0')
  if not entry or entry == '' or max <= 0 then return end
  local n = redis.call('XLEN', stream)
  if n >= max then
    redis.call('XTRIM', stream, 'MAXLEN', max - 1)
    redis.call('INCRBY', dropped, n - max + 1)
  end
  if extra then
    return redis.call('XADD', stream, '*', 'id', id, 'r', entry, 'x', extra)
  end
  return redis.call('XADD', stream, '*', 'id', id, 'r', entry)
end
