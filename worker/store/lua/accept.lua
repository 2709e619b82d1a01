-- ACCEPT: append one input to the conversation's mailbox, unless its id was accepted before.
-- KEYS: inbox, seen, tomb, inbound, hold, lastmsg, then rest: the pending zset (when pending_member is set), then
--       the broker's queue list (when wake_message is set), then the conversation's timers zset and timed hash (when
--       reset_flag is set), then every key of the conversation when an idle TTL is set
-- ARGV: id, entry, now_ms, max_inbox, dedupe_max, dedupe_ms, ttl_ms, pending_member ('' on a Cluster, where the
--       pending zset lives in another slot and the caller adds to it separately), inbound_flag ('1' when the input
--       is a message the player sent), ends_burst_flag ('1' when the input is a game event the model answers, a
--       reset or a person's message),
--       wake_message (the Celery message that wakes a worker, '' when the caller publishes its own wake-up),
--       wake_every_flag ('1': every accepted input pushes it; else only the one that needs a wake-up),
--       reset_flag ('1' when the input is a reset sent at once: accepted, it drops every timer the conversation holds)
-- Returns: {ACCEPTED | DUPLICATE | FULL, the mailbox's depth, 1 when it ended a burst's hold (else 0),
--           1 when it pushed wake_message (else 0)}
-- An id in the tombstone of a deleted conversation is a duplicate too (the tombstone has its own expiry).
-- The player's message opens WhatsApp's customer-service window: its first acceptance records the time (a
-- duplicate, e.g. Meta's retry of the webhook, does not move it; a refusal for a full mailbox does, since the player
-- wrote all the same), and the time only moves forward, whatever order producers' calls land in. Its id, when it is
-- WhatsApp's (a wamid: a producer's own ids are not Meta's), is kept as the message an operator's reaction answers.
-- A game event the model answers, a reset or a person's message ends a burst (see worker/service/drain/burst.py):
-- accepted, it ends the hold of a burst's quiet period ('b', set by DEFER) in the same step, so the caller wakes a
-- worker that answers the burst now and then the input. A retry's hold ('1') stays: its backoff is not the event's
-- to cut.
-- The wake-up: when the broker is this same Redis, the producer hands over the Celery message kombu would
-- have LPUSHed (built from kombu's own output, its ids made by the caller: this script stays deterministic) and it is
-- pushed here, in the same step, when the input needs a wake-up by the producers' rule (worker/queue/wakeup.py,
-- wake_needed): accepted, and the first input waiting, or it ended a burst's hold, or wake-ups are not coalesced.
-- A reset sent at once joins the order with no timers held behind it (docs/producers.md), so it drops them in the
-- step that accepts it: a reset refused (FULL) leaves them held, and a producer's retry of it (the same message id, a
-- duplicate) leaves alone the timers the game held after the first one joined the order.
--! include tail
--! include codes
--! include trim_seen
--! include take_in
local inbox = KEYS[1]
local seen = KEYS[2]
local tomb = KEYS[3]
local inbound = KEYS[4]
local hold = KEYS[5]
local lastmsg = KEYS[6]
local rest = tail(KEYS, 7)
local id = ARGV[1]
local entry = ARGV[2]
local now_ms = ARGV[3]
local max_inbox = ARGV[4]
local dedupe_max = ARGV[5]
local dedupe_ms = ARGV[6]
local ttl_ms = ARGV[7]
local pending_member = ARGV[8]
local inbound_flag = ARGV[9]
local ends_burst_flag = ARGV[10]
local wake_message = ARGV[11]
local wake_every_flag = ARGV[12]
local reset_flag = ARGV[13]

local now = tonumber(now_ms)
local first_ttl = 1
if pending_member ~= '' then
  mark_pending(rest[first_ttl], pending_member, now, redis.call('LLEN', inbox) == 0)
  first_ttl = first_ttl + 1
end
local wake_queue = nil
if wake_message ~= '' then
  wake_queue = rest[first_ttl]
  first_ttl = first_ttl + 1
end
local timers, timed = nil, nil
if reset_flag == '1' then
  timers, timed = rest[first_ttl], rest[first_ttl + 1]
  first_ttl = first_ttl + 2
end
if seen_before(seen, tomb, id) then
  return {DUPLICATE, redis.call('LLEN', inbox), 0, 0}
end
if inbound_flag == '1' and open_window(inbound, now_ms) and string.sub(id, 1, 6) == 'wamid.' then
  redis.call('SET', lastmsg, id)
end
local n = redis.call('LLEN', inbox)
if n >= tonumber(max_inbox) then
  return {FULL, n, 0, 0}
end
redis.call('ZADD', seen, now, id)
redis.call('RPUSH', inbox, entry)
if timers then redis.call('DEL', timers, timed) end
trim_seen(seen, now, dedupe_ms, dedupe_max)
refresh_ttl(rest, first_ttl, ttl_ms)
local ended = 0
if ends_burst_flag == '1' then ended = end_burst_hold(hold) end
local woke = 0
if wake_queue and (n == 0 or ended == 1 or wake_every_flag == '1') then
  redis.call('LPUSH', wake_queue, wake_message)
  woke = 1
end
return {ACCEPTED, n + 1, ended, woke}
