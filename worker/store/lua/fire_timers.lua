-- FIRE_TIMERS: accept the conversation's due timers into its mailbox, earliest first, with ACCEPT's checks.
-- KEYS: timers, timed, inbox, seen, tomb, inbound, hold, then rest: the pending zset and the due index (when
--       index_member is set), then every key of the conversation when an idle TTL is set
-- ARGV: now_ms, max_inbox, dedupe_max, dedupe_ms, ttl_ms, batch, index_member ('' on a Cluster: the caller updates
--       the pending zset before and the due index after), retry_ms
-- Returns: {timers accepted, mailbox depth before, earliest due ms left (-1 none), 1 when the mailbox was full,
--           timers dropped as duplicates, then the id and due ms of each timer accepted, 1 when it ended a burst's
--           hold (else 0)}
-- Atomic, so any number of workers may call it for the same conversation: each due timer is accepted by one call,
-- once (and an id accepted before is a duplicate, dropped as ACCEPT would). A full mailbox keeps the due timers held;
-- the due index then says to look again after retry_ms. A reset accepted here drops the timers still held behind it
-- (a reset joins the order with no pending timers, as it does when it is sent at once).
-- The flags of a held input: first '1' when it opens the customer-service window, second 'r' for a reset or 'e' for
-- a game event the model answers, which ends a burst's hold as ACCEPT does (see accept.lua).
--! include tail
--! include trim_seen
--! include take_in
local timers = KEYS[1]
local timed = KEYS[2]
local inbox = KEYS[3]
local seen = KEYS[4]
local tomb = KEYS[5]
local inbound = KEYS[6]
local hold = KEYS[7]
local rest = tail(KEYS, 8)
local now_ms = ARGV[1]
local max_inbox = ARGV[2]
local dedupe_max = ARGV[3]
local dedupe_ms = ARGV[4]
local ttl_ms = ARGV[5]
local batch = ARGV[6]
local index_member = ARGV[7]
local retry_ms = ARGV[8]

local now = tonumber(now_ms)
local due = redis.call('ZRANGEBYSCORE', timers, '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(batch))
local depth = redis.call('LLEN', inbox)
local before = depth
local fired, dropped, full, ends_burst = {}, 0, 0, false
for i = 1, #due, 2 do
  local id, at = due[i], due[i + 1]
  local held = redis.call('HGET', timed, id)
  if not held or seen_before(seen, tomb, id) then
    dropped = dropped + 1
  elseif depth >= tonumber(max_inbox) then
    full = 1
    break
  else
    redis.call('ZADD', seen, now, id)
    redis.call('RPUSH', inbox, string.sub(held, 3))
    depth = depth + 1
    if string.sub(held, 1, 1) == '1' then open_window(inbound, now_ms) end
    if string.sub(held, 2, 2) == 'e' then ends_burst = true end
    fired[#fired + 1] = id
    fired[#fired + 1] = at
  end
  redis.call('ZREM', timers, id)
  redis.call('HDEL', timed, id)
  if held and string.sub(held, 2, 2) == 'r' and #fired > 0 and fired[#fired - 1] == id then
    dropped = dropped + redis.call('ZCARD', timers)
    redis.call('DEL', timers, timed)
    break
  end
end
if #fired > 0 then trim_seen(seen, now, dedupe_ms, dedupe_max) end
local ended = 0
if ends_burst then ended = end_burst_hold(hold) end
local first = redis.call('ZRANGE', timers, 0, 0, 'WITHSCORES')
local earliest = -1
if first[2] then earliest = tonumber(first[2]) end
if full == 1 then earliest = now + tonumber(retry_ms) end
local first_ttl = 1
if index_member ~= '' then
  if #fired > 0 then mark_pending(rest[1], index_member, now, before == 0) end
  if earliest >= 0 then
    redis.call('ZADD', rest[2], earliest, index_member)
  else
    redis.call('ZREM', rest[2], index_member)
  end
  first_ttl = 3
end
if #fired > 0 then refresh_ttl(rest, first_ttl, ttl_ms) end
return {#fired / 2, before, earliest, full, dropped, fired, ended}
