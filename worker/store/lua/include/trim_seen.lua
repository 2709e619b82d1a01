-- trim_seen(seen, now, dedupe_ms, dedupe_max): bound the dedupe memory: ids older than dedupe_ms go, then the
-- oldest beyond dedupe_max (ACCEPT, and FIRE_TIMERS which accepts the same way).
local function trim_seen(seen, now, dedupe_ms, dedupe_max)
  redis.call('ZREMRANGEBYSCORE', seen, '-inf', now - tonumber(dedupe_ms))
  local c = redis.call('ZCARD', seen)
  local max = tonumber(dedupe_max)
  if c > max then
    redis.call('ZREMRANGEBYRANK', seen, 0, c - max - 1)
  end
end
