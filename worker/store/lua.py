"""The Lua scripts. Each touches only the keys of one conversation (one hash tag), so each runs atomically
on a standalone Redis and on a Cluster. One script per job; each has one wrapper in :mod:`worker.store.scripts`
that names its arguments and parses its result. Every script returns an array of one fixed shape (fields that do
not apply are padded with ``false`` or 0), so the parser never guesses from the length. A negative first element
is a refusal: -1 the fence moved, -2 the state version moved, -3 the entry is no longer at the head."""

HEAD_ID = """
local function head_id(entry)
  if not entry then return nil end
  local nl = string.find(entry, '\\n', 1, true)
  if not nl then return entry end
  return string.sub(entry, 1, nl - 1)
end
"""


# The durable record: append one entry (``id``: its unique key in PostgreSQL, so a replayed export changes nothing;
# ``r``: the msgpack record; ``x``: what only the script knows, e.g. a delivered reply's provider message ids) to the
# stream of the conversation's slot. Bounded: at ``max`` entries the oldest go and
# are counted in ``dropped`` (the exporter is down or behind; ops see the count). ``max`` 0 or an empty entry: the
# record is off (no database configured), nothing is written. Returns the entry's stream id (nil when off).
APPEND_RECORD = """
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
"""


# Fencing tokens: a missing fence (new conversation, or deleted, or expired after the idle TTL) starts from the
# clock in microseconds, so a token from an earlier life of the conversation, held by a worker stalled since,
# can never match again. Tokens travel as decimal strings: a Lua number would print as 1.79e+15.
NEXT_TOKEN = """
local function next_token(fence)
  if redis.call('EXISTS', fence) == 0 then
    local now = redis.call('TIME')
    redis.call('SET', fence, now[1] .. string.format('%06d', tonumber(now[2])))
  end
  return string.format('%d', redis.call('INCR', fence))
end
"""


# KEYS: inbox, seen, tomb, inbound, [pending,] then every key of the conversation when an idle TTL is set
# ARGV: id, entry, now_ms, max_inbox, dedupe_max, dedupe_ms, ttl_ms, pending member ('' on a Cluster, where the
#       pending zset lives in another slot and the caller adds to it separately), inbound ('1' when the input is a
#       message the player sent)
# An id in the tombstone of a deleted conversation is a duplicate too (the tombstone has its own expiry).
# The player's message opens WhatsApp's customer-service window: its first acceptance records the time (a
# duplicate, e.g. Meta's retry of the webhook, does not move it; a refusal for a full mailbox does, since the player
# wrote all the same), and the time only moves forward, whatever order producers' calls land in.
ACCEPT = """
local first_ttl = 5
if ARGV[8] ~= '' then
  redis.call('ZADD', KEYS[5], tonumber(ARGV[3]), ARGV[8])
  first_ttl = 6
end
if redis.call('ZSCORE', KEYS[2], ARGV[1]) or redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  return {0, redis.call('LLEN', KEYS[1])}
end
local now = tonumber(ARGV[3])
if ARGV[9] == '1' and now > tonumber(redis.call('GET', KEYS[4]) or '0') then
  redis.call('SET', KEYS[4], ARGV[3])
end
local n = redis.call('LLEN', KEYS[1])
if n >= tonumber(ARGV[4]) then
  return {-1, n}
end
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('RPUSH', KEYS[1], ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[6]))
local c = redis.call('ZCARD', KEYS[2])
local max = tonumber(ARGV[5])
if c > max then
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, c - max - 1)
end
local ttl = tonumber(ARGV[7])
if ttl > 0 then
  for i = first_ttl, #KEYS do redis.call('PEXPIRE', KEYS[i], ttl) end
end
return {1, n + 1}
"""

# KEYS: hold, inbox, lease, fence, state, attempts, journal   ARGV: lease_ms, peek, the caller's state tag ('' none)
# One round trip to start draining: -2 held for a retry (or a burst's quiet period), 0 nothing waiting, -1 another
# worker holds the lease; else take the lease. -> {token or code, head entry, blob, version, attempts at the head,
# the ``peek`` entries after the head (what a burst may take in; empty when peek is 0), the state's tag, whether
# the turn journal holds entries}
# The state's tag changes with every write of the blob (see COMMIT): when the caller already holds the state with
# that tag (decoded, from its last turn on this conversation), the blob is not sent again.
BEGIN = HEAD_ID + NEXT_TOKEN + """
if redis.call('EXISTS', KEYS[1]) == 1 then return {-2, false, false, 0, 0, {}, '', 0} end
local head = redis.call('LINDEX', KEYS[2], 0)
if not head then return {0, false, false, 0, 0, {}, '', 0} end
if redis.call('EXISTS', KEYS[3]) == 1 then return {-1, false, false, 0, 0, {}, '', 0} end
local t = next_token(KEYS[4])
redis.call('SET', KEYS[3], t, 'PX', ARGV[1])
local s = redis.call('HMGET', KEYS[5], 'blob', 'version', 'tag')
local blob, tag = s[1], s[3] or ''
if blob and tag ~= '' and tag == ARGV[3] then blob = false end
local a = redis.call('HINCRBY', KEYS[6], head_id(head), 1)
local after = {}
local peek = tonumber(ARGV[2] or '0')
if peek > 0 then after = redis.call('LRANGE', KEYS[2], 1, peek) end
return {t, head, blob, s[2] or '0', a, after, tag, redis.call('EXISTS', KEYS[7])}
"""

# KEYS: fence, lease, attempts, hold   ARGV: token, head id, hold_ms
# A burst is still being typed: give the lease up without counting the attempt BEGIN counted at the head (waiting
# is not a crash), and hold the conversation for the rest of the quiet period, so the wake-ups of the burst's own
# messages return at once; the caller schedules the wake-up that ends the hold. With hold_ms 0 it is a hand-back
# (fair scheduling): the lease is given up with inputs still waiting and nothing held, and the caller's new wake-up
# puts the conversation at the back of the queue. -> 1, or -1 when the fence moved
DEFER = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if tonumber(redis.call('HINCRBY', KEYS[3], ARGV[2], -1)) <= 0 then redis.call('HDEL', KEYS[3], ARGV[2]) end
if tonumber(ARGV[3]) > 0 then redis.call('SET', KEYS[4], '1', 'PX', ARGV[3]) end
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
return 1
"""


# The ``sent`` hash describes one reply, the outbox head: when the head changed (a new reply), the progress
# left from another reply is dropped, so the per-reply failure count starts again at 0.
SENT_FOR = """
local function sent_for(sent, rid)
  local cur = redis.call('HGET', sent, 'reply_id')
  if cur and cur ~= rid then redis.call('DEL', sent) end
end
"""


# Claiming the outbox head for a send: which part is next, whether a part was left in flight by a crash
# (so it may already have reached the user), and the in-flight mark for the part about to be sent, written
# before the send. When the outbox is empty the delivery lease is given up in the same script, so a reply
# committed meanwhile cannot be left without a deliverer (the delivery side of the lost wake-up). The claim also
# reads when the player last wrote (``inbound``, ms): the customer-service window the send must respect, read
# here rather than in a round trip of its own before every reply.
# -> {1, head entry, part, crashed, last inbound ms or false} or {0, false, 0, 0, false}
CLAIM = HEAD_ID + SENT_FOR + """
local function claim(outbox, sent, dlease, token, lease_ms, inbound)
  local head = redis.call('LINDEX', outbox, 0)
  if not head then
    if redis.call('GET', dlease) == token then redis.call('DEL', dlease) end
    return {0, false, 0, 0, false}
  end
  local rid = head_id(head)
  sent_for(sent, rid)
  local p = redis.call('HMGET', sent, 'reply_id', 'part', 'inflight')
  local part = 0
  if p[1] == rid and p[2] then part = tonumber(p[2]) end
  local crashed = 0
  if p[1] == rid and p[3] == rid .. ':' .. part then crashed = 1 end
  redis.call('HSET', sent, 'reply_id', rid, 'part', part, 'inflight', rid .. ':' .. part)
  redis.call('SET', dlease, token, 'PX', lease_ms)
  return {1, head, part, crashed, redis.call('GET', inbound)}
end
"""

# Starting a delivery: take the delivery lease with a fresh fencing token and claim the outbox head. Returns
# {-1, ...} when another worker delivers, {0, ...} when nothing waits, else {token, head entry, part, crashed, last
# inbound}. Shared by BEGIN_DELIVERY and by the commit that ends a drain, so both start a delivery the same way.
START_DELIVERY = CLAIM + NEXT_TOKEN + """
local function start_delivery(dlease, dfence, outbox, sent, lease_ms, inbound)
  if redis.call('EXISTS', dlease) == 1 then return {-1, false, 0, 0, false} end
  if redis.call('LLEN', outbox) == 0 then return {0, false, 0, 0, false} end
  local t = next_token(dfence)
  local c = claim(outbox, sent, dlease, t, lease_ms, inbound)
  return {t, c[2], c[3], c[4], c[5]}
end
"""

# KEYS: fence, state, inbox, attempts, outbox, trace, dead, lease, dlease, dfence, sent, journal, record stream,
#       record dropped counter, usage, inbound
# ARGV: token, expected_version, input_id, state_mode (keep|set|clear), blob, reply_entry, trace_entry,
#       dead_entry, lease_ms, trace_max, dead_max, ttl_ms, claim_ms ('' or the delivery lease), peek, record entry
#       ('' none), record max, usage day ('' none), tokens, then the ids of the inputs after the head that the same
#       turn applied (a burst), in mailbox order
# ``usage`` counts the conversation's tokens per UTC day (the daily token budget reads it); it keeps three days.
# -> {version or code, depth or current version, released, next entry, attempts at next, kept blob,
#     delivery token, delivery head entry, part, crashed, the ``peek`` entries after the next one, the state's tag,
#     the last inbound ms read by the delivery claim}
# The tag names the blob written: the writer's token and the new version, unique over the conversation's lives
# (tokens never repeat, see NEXT_TOKEN), so a worker that kept a state decoded knows when it is still the stored one.
# The commit hands back the next input (counting an attempt at it), or gives the lease up when there is none:
# atomic with the pop, so a producer's push either lands before (and is returned) or finds no lease.
# With claim_ms, a commit that empties the mailbox also starts the delivery when nobody delivers: it takes the
# delivery lease and claims the outbox head as BEGIN_DELIVERY does, saving the deliverer that round trip.
COMMIT = START_DELIVERY + APPEND_RECORD + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {-1, 0, 0, false, 0, false, 0, false, 0, 0, {}, '', false} end
local v = tonumber(redis.call('HGET', KEYS[2], 'version') or '0')
if v ~= tonumber(ARGV[2]) then return {-2, v, 0, false, 0, false, 0, false, 0, 0, {}, '', false} end
if head_id(redis.call('LINDEX', KEYS[3], 0)) ~= ARGV[3] then return {-3, v, 0, false, 0, false, 0, false, 0, 0, {}, '', false} end
local n = 1
for i = 19, #ARGV do
  if head_id(redis.call('LINDEX', KEYS[3], n)) ~= ARGV[i] then return {-3, v, 0, false, 0, false, 0, false, 0, 0, {}, '', false} end
  n = n + 1
end
local mode = ARGV[4]
if mode == 'set' then
  redis.call('HSET', KEYS[2], 'blob', ARGV[5], 'tag', ARGV[1] .. ':' .. (v + 1))
elseif mode == 'clear' then
  redis.call('HDEL', KEYS[2], 'blob', 'tag')
end
local tag = redis.call('HGET', KEYS[2], 'tag') or ''
redis.call('HSET', KEYS[2], 'version', v + 1)
redis.call('LTRIM', KEYS[3], n, -1)
redis.call('HDEL', KEYS[4], ARGV[3], ARGV[3] .. ':retries', ARGV[3] .. ':bad')
for i = 19, #ARGV do redis.call('HDEL', KEYS[4], ARGV[i], ARGV[i] .. ':retries', ARGV[i] .. ':bad') end
append_record(KEYS[13], KEYS[14], ARGV[16], ARGV[1] .. ':' .. (v + 1), ARGV[15])
if ARGV[17] and ARGV[17] ~= '' and tonumber(ARGV[18]) > 0 then
  redis.call('HINCRBY', KEYS[15], ARGV[17], tonumber(ARGV[18]))
  redis.call('PEXPIRE', KEYS[15], 259200000)
end
redis.call('DEL', KEYS[12])  -- the input's turn journal: applied now, so nothing is left to replay
if ARGV[6] ~= '' then redis.call('RPUSH', KEYS[5], ARGV[6]) end
if ARGV[7] ~= '' then
  redis.call('RPUSH', KEYS[6], ARGV[7])
  redis.call('LTRIM', KEYS[6], -tonumber(ARGV[10]), -1)
end
if ARGV[8] ~= '' then
  redis.call('RPUSH', KEYS[7], ARGV[8])
  redis.call('LTRIM', KEYS[7], -tonumber(ARGV[11]), -1)
end
-- The idle TTL: the keys this script writes (the accept of the input, moments ago, set it on all the others).
local ttl = tonumber(ARGV[12])
if ttl > 0 then
  for _, i in ipairs({1, 2, 3, 4, 5, 6, 7, 10, 11, 12}) do redis.call('PEXPIRE', KEYS[i], ttl) end
end
local depth = redis.call('LLEN', KEYS[3])
if depth == 0 then
  redis.call('DEL', KEYS[8])
  if ARGV[13] ~= '' then
    local d = start_delivery(KEYS[9], KEYS[10], KEYS[5], KEYS[11], ARGV[13], KEYS[16])
    if tonumber(d[1]) > 0 then return {v + 1, 0, 1, false, 0, false, d[1], d[2], d[3], d[4], {}, tag, d[5]} end  -- else: busy, or nothing to send
  end
  return {v + 1, 0, 1, false, 0, false, 0, false, 0, 0, {}, tag, false}
end
redis.call('SET', KEYS[8], ARGV[1], 'PX', ARGV[9])
local nxt = redis.call('LINDEX', KEYS[3], 0)
local a = redis.call('HINCRBY', KEYS[4], head_id(nxt), 1)
-- The blob goes back only when the caller does not already have it (mode keep): states can be large.
local blob = false
if mode == 'keep' then blob = redis.call('HGET', KEYS[2], 'blob') end
local after = {}
local peek = tonumber(ARGV[14] or '0')
if peek > 0 then after = redis.call('LRANGE', KEYS[3], 1, peek) end
return {v + 1, depth, 0, nxt, a, blob, 0, false, 0, 0, after, tag, false}
"""

# KEYS: fence, inbox, journal   ARGV: token, input_id, field, entry, max_entries, ttl_ms
# One entry of the head input's turn journal (a model round or a tool result), written under the fenced lease
# before the model sees it. -> {1, entries} recorded; {-1, 0} the fence moved; {-3, 0} the input is no longer the
# head (it was applied); {-4, entries} the journal is full (bounded: the entry is not kept, the turn goes on)
RECORD_STEP = HEAD_ID + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {-1, 0} end
if head_id(redis.call('LINDEX', KEYS[2], 0)) ~= ARGV[2] then return {-3, 0} end
local n = redis.call('HLEN', KEYS[3])
if n >= tonumber(ARGV[5]) and redis.call('HEXISTS', KEYS[3], ARGV[3]) == 0 then return {-4, n} end
redis.call('HSET', KEYS[3], ARGV[3], ARGV[4])
local ttl = tonumber(ARGV[6])
if ttl > 0 then redis.call('PEXPIRE', KEYS[3], ttl) end
return {1, redis.call('HLEN', KEYS[3])}
"""

# KEYS: fence, lease   ARGV: token
# Give the lease up (after an error, or by a drain that ends without a commit); the caller re-wakes if needed.
RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) return 1 end
return 0
"""

# KEYS: fence, lease   ARGV: token, lease_ms
# The heartbeat of a running turn: while the fence still holds our token nobody took a newer one, so (re)setting
# the lease is safe even after it expired. -> 1 renewed, 0 another worker took the conversation (nothing changed)
RENEW_LEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return 1
"""

# KEYS: fence, attempts   ARGV: token, input_id, counter ('retries' or 'bad')
# A clean, retryable failure: the attempt counted at the head is given back (it did not crash the worker) and
# counted as a retry instead, on its own counter (unreadable answers apart from outages, so that an outage does not
# use up the small budget of the other). -> retries so far on that counter, or -1 when the fence moved
NOTE_RETRY = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
redis.call('HINCRBY', KEYS[2], ARGV[2], -1)
return redis.call('HINCRBY', KEYS[2], ARGV[2] .. ':' .. ARGV[3], 1)
"""

# KEYS: fence, state, quarantine   ARGV: token, expected_version, record, max
QUARANTINE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {-1, 0} end
local v = tonumber(redis.call('HGET', KEYS[2], 'version') or '0')
if v ~= tonumber(ARGV[2]) then return {-2, v} end
redis.call('RPUSH', KEYS[3], ARGV[3])
redis.call('LTRIM', KEYS[3], -tonumber(ARGV[4]), -1)
redis.call('HDEL', KEYS[2], 'blob', 'tag')
redis.call('HSET', KEYS[2], 'version', v + 1)
return {v + 1, 0}
"""

# KEYS: dfence, sent   ARGV: token, reply_id, part
MARK_INFLIGHT = SENT_FOR + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
sent_for(KEYS[2], ARGV[2])
redis.call('HSET', KEYS[2], 'reply_id', ARGV[2], 'part', ARGV[3], 'inflight', ARGV[2] .. ':' .. ARGV[3])
return 1
"""

# KEYS: dfence, sent   ARGV: token
CLEAR_INFLIGHT = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
redis.call('HDEL', KEYS[2], 'inflight')
return 1
"""

# The provider message ids of the head reply's parts sent so far, with one more.
IDS_WITH = """
local function ids_with(sent, reply_id, provider_id)
  local ids = redis.call('HGET', sent, 'ids')
  if ids and redis.call('HGET', sent, 'reply_id') == reply_id then return ids .. ',' .. provider_id end
  return provider_id
end
"""

# KEYS: dfence, outbox, sent, dlease   ARGV: token, reply_id, part, provider_id, lease_ms
# A part that is not the reply's last was sent (the last one goes through SENT_LAST_CLAIM_NEXT).
MARK_SENT = HEAD_ID + SENT_FOR + IDS_WITH + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if head_id(redis.call('LINDEX', KEYS[2], 0)) ~= ARGV[2] then return -3 end
sent_for(KEYS[3], ARGV[2])
local ids = ids_with(KEYS[3], ARGV[2], ARGV[4])
redis.call('HSET', KEYS[3], 'reply_id', ARGV[2], 'part', tonumber(ARGV[3]) + 1, 'ids', ids)
redis.call('HDEL', KEYS[3], 'inflight')
redis.call('SET', KEYS[4], ARGV[1], 'PX', ARGV[5])
return 1
"""

# KEYS: dlease, dfence, outbox, sent, inbound   ARGV: lease_ms
# Start delivering in one round trip: {-1} another worker delivers, {0} nothing to send, else take the delivery
# lease and claim the head: {token, head entry, part, crashed, last inbound}.
BEGIN_DELIVERY = START_DELIVERY + """
return start_delivery(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], KEYS[5])
"""

# KEYS: dfence, outbox, sent, dlease, inbound   ARGV: token, lease_ms
# Claim the next reply, or give the delivery lease up when the outbox is empty.
CLAIM_NEXT = CLAIM + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {-1, false, 0, 0, false} end
return claim(KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], KEYS[5])
"""

# KEYS: dfence, outbox, sent, delivered, dlease, record stream, record dropped counter, inbound
# ARGV: token, reply_id, provider_id, delivered_max, lease_ms, record entry ('' none), record max
# The last part of a reply was sent: record it, drop the reply from the outbox and claim the next one (or give
# the lease up), in one round trip. The durable record gets the reply's provider message ids.
SENT_LAST_CLAIM_NEXT = CLAIM + IDS_WITH + APPEND_RECORD + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {-1, false, 0, 0, false} end
if head_id(redis.call('LINDEX', KEYS[2], 0)) ~= ARGV[2] then return {-3, false, 0, 0, false} end
local ids = ids_with(KEYS[3], ARGV[2], ARGV[3])
redis.call('LPOP', KEYS[2])
redis.call('DEL', KEYS[3])
append_record(KEYS[6], KEYS[7], ARGV[7], 'o:' .. ARGV[1] .. ':' .. ARGV[2], ARGV[6], ids)
redis.call('RPUSH', KEYS[4], ARGV[2] .. '\\t' .. ids)
redis.call('LTRIM', KEYS[4], -tonumber(ARGV[4]), -1)
return claim(KEYS[2], KEYS[3], KEYS[5], ARGV[1], ARGV[5], KEYS[8])
"""

# KEYS: dfence, outbox, sent, dead, record stream, record dropped counter
# ARGV: token, reply_id, dead_entry, dead_max, record entry ('' none), record max
DEAD_REPLY = HEAD_ID + APPEND_RECORD + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if head_id(redis.call('LINDEX', KEYS[2], 0)) ~= ARGV[2] then return -3 end
append_record(KEYS[5], KEYS[6], ARGV[6], 'f:' .. ARGV[1] .. ':' .. ARGV[2], ARGV[5])
redis.call('LPOP', KEYS[2])
redis.call('DEL', KEYS[3])
redis.call('RPUSH', KEYS[4], ARGV[3])
redis.call('LTRIM', KEYS[4], -tonumber(ARGV[4]), -1)
return 1
"""

# KEYS: dfence, outbox, sent   ARGV: token, reply_id
# One failed (retryable) send of the outbox head: counted in the head's progress hash, so the count survives
# task restarts, the inline delivery, later turns and the sweeper, and goes with the reply when it is sent or
# dead-lettered. -> failures so far for that reply; -1 the fence moved; -3 the reply is no longer the head
NOTE_DELIVERY_FAILURE = HEAD_ID + SENT_FOR + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if head_id(redis.call('LINDEX', KEYS[2], 0)) ~= ARGV[2] then return -3 end
sent_for(KEYS[3], ARGV[2])
redis.call('HSET', KEYS[3], 'reply_id', ARGV[2])
return redis.call('HINCRBY', KEYS[3], 'failures', 1)
"""

# KEYS: dead, target list   ARGV: index, expected entry, new entry
REPLAY = """
local cur = redis.call('LINDEX', KEYS[1], tonumber(ARGV[1]))
if cur ~= ARGV[2] then return 0 end
redis.call('LSET', KEYS[1], tonumber(ARGV[1]), '__parley_replayed__')
redis.call('LREM', KEYS[1], 1, '__parley_replayed__')
redis.call('RPUSH', KEYS[2], ARGV[3])
return 1
"""

# KEYS: pending   ARGV: member, score
ZREM_IF_SCORE = """
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if s and tonumber(s) == tonumber(ARGV[2]) then return redis.call('ZREM', KEYS[1], ARGV[1]) end
return 0
"""

# KEYS: tomb, record stream, record dropped counter, seen, then every key of the conversation to delete
# ARGV: now_ms, tomb_ms, tomb_max, record id, record entry ('' none), record max
# The durable record gets the delete too, behind everything the conversation recorded before it: the exporter
# erases the conversation from PostgreSQL when it reaches it, so a deletion reaches the database from any caller.
# Delete, keeping the input ids seen in a tombstone (scored by the delete time) that expires after tomb_ms, so a
# retried webhook of the deleted conversation dedupes instead of starting it again. Ids tombstoned longer ago
# than tomb_ms go first, then the oldest beyond tomb_max. tomb_ms 0: no tombstone.
# -> ids in the tombstone, the delete record's stream id (false when the record is off)
DELETE_KEEPING_TOMBSTONE = APPEND_RECORD + """
local now, tomb_ms = tonumber(ARGV[1]), tonumber(ARGV[2])
local recorded = append_record(KEYS[2], KEYS[3], ARGV[6], ARGV[4], ARGV[5]) or false
if tomb_ms > 0 then
  local ids = redis.call('ZRANGE', KEYS[4], 0, -1)
  for i = 1, #ids do redis.call('ZADD', KEYS[1], now, ids[i]) end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tomb_ms)
  local c = redis.call('ZCARD', KEYS[1])
  local max = tonumber(ARGV[3])
  if c > max then redis.call('ZREMRANGEBYRANK', KEYS[1], 0, c - max - 1) end
  if #ids > 0 then redis.call('PEXPIRE', KEYS[1], tomb_ms) end
end
for i = 4, #KEYS do redis.call('DEL', KEYS[i]) end
return {redis.call('ZCARD', KEYS[1]), recorded}
"""

# How far along a delivery status is. Meta sends statuses in no particular order and retries old ones for a day
# and a half (a `read` may come before its `delivered`, or alone), so a status is kept only when it ranks above
# the one kept: sent < delivered < read, and failed is final. A status Meta may add later ranks 0: kept only while
# nothing better is known.
STATUS_RANK = """
local RANKS = {sent = 1, delivered = 2, read = 3, failed = 4}
local function rank(status)
  if not status then return -1 end
  return RANKS[status] or 0
end
"""

# KEYS: statuses, statusorder, sent, record stream, record dropped counter
# ARGV: provider_id, status, detail, max_kept, reply_id ('' when the status names no part), part, record entry
#       ('' none), record max
# One delivery status webhook. The message's latest status moves only forward (see STATUS_RANK); ``statuses`` keeps
# the ``max_kept`` messages whose first status came last. When the status names a part of a reply (WhatsApp hands
# back the biz_opaque_callback_data we sent it with) and that part is still marked in flight, the status is kept
# with the part's progress too: proof that the send reached WhatsApp, which is what a deliverer that finds the part
# left in flight by a crash needs (MARK_SENT and the claims keep those fields only for the part they are about).
# -> {1 moved forward / 0 kept the one it had, the latest status, 1 when kept for the part in flight / 0}
RECORD_STATUS = STATUS_RANK + APPEND_RECORD + """
if redis.call('TYPE', KEYS[1])['ok'] == 'list' then redis.call('DEL', KEYS[1]) end  -- the log of earlier versions
local now = redis.call('TIME')
local ms = string.format('%d', tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000))
local status = ARGV[2]
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local kept = nil
if cur then kept = string.match(cur, '^([^\\t]*)') end
local moved = 0
local latest = kept
if rank(status) > rank(kept) then
  redis.call('HSET', KEYS[1], ARGV[1], status .. '\\t' .. ms .. '\\t' .. ARGV[3])
  moved = 1
  latest = status
  append_record(KEYS[4], KEYS[5], ARGV[8], 's:' .. ARGV[1] .. ':' .. status, ARGV[7])
  if not cur then
    redis.call('ZADD', KEYS[2], 'NX', ms, ARGV[1])
    local n = redis.call('ZCARD', KEYS[2])
    local max = tonumber(ARGV[4])
    if n > max then
      local old = redis.call('ZRANGE', KEYS[2], 0, n - max - 1)
      redis.call('HDEL', KEYS[1], unpack(old))
      redis.call('ZREMRANGEBYRANK', KEYS[2], 0, n - max - 1)
    end
  end
end
local for_part = 0
if ARGV[5] ~= '' then
  local tag = ARGV[5] .. ':' .. ARGV[6]
  local s = redis.call('HMGET', KEYS[3], 'reply_id', 'inflight', 'seen_part', 'seen')
  if s[1] == ARGV[5] and s[2] == tag then
    local seen = nil
    if s[3] == tag then seen = s[4] end
    if rank(status) > rank(seen) then
      redis.call('HSET', KEYS[3], 'seen_part', tag, 'seen', status, 'seen_id', ARGV[1])
    end
    for_part = 1
  end
end
return {moved, latest, for_part}
"""

# KEYS: dfence, outbox, sent   ARGV: token, reply_id, part
# What is known of a part a crashed deliverer left in flight: the best status webhook kept for it (RECORD_STATUS
# keeps one while the part is in flight) and how long ago a deliverer first found it so. That first look starts the
# clock (``suspect_part`` / ``suspect_at``, in Redis's time, so every worker reads the same clock): the grace a
# deliverer gives the part's status webhooks runs from then, at least one lease after the crash.
# -> {1, status or false, its provider message id or false, ms since first found}; {0, ...} the part is not in
# flight (nothing to decide); -1 the fence moved; -3 the reply is no longer the head
INFLIGHT_OUTCOME = HEAD_ID + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {-1, false, false, 0} end
if head_id(redis.call('LINDEX', KEYS[2], 0)) ~= ARGV[2] then return {-3, false, false, 0} end
local tag = ARGV[2] .. ':' .. ARGV[3]
local s = redis.call('HMGET', KEYS[3], 'reply_id', 'inflight', 'seen_part', 'seen', 'seen_id', 'suspect_part',
                     'suspect_at')
if s[1] ~= ARGV[2] or s[2] ~= tag then return {0, false, false, 0} end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local waited = 0
if s[6] == tag and tonumber(s[7]) then
  waited = math.max(0, ms - tonumber(s[7]))
else
  redis.call('HSET', KEYS[3], 'suspect_part', tag, 'suspect_at', string.format('%d', ms))
end
if s[3] == tag then return {1, s[4], s[5] or false, waited} end
return {1, false, false, waited}
"""


# KEYS: the sender number's bucket, the recipient's bucket (one hash tag: the number's)
# ARGV: number interval µs, number tolerance µs, recipient interval µs, recipient tolerance µs, max wait µs
# GCRA, two limits at once, on Redis's clock (so workers on hosts whose clocks differ share one schedule). Each
# bucket keeps its theoretical arrival time (TAT); a send may go once now >= TAT - tolerance in both. A recipient
# who must wait takes nothing: the caller waits and asks again (reserving it would move the number's schedule to
# that player's slot, and one player's pair wait would hold everyone's messages back). When the recipient may have
# one, a wait for the number up to max_wait reserves the slot (both TATs move past it; the caller sleeps, then
# sends without asking again, so workers waiting for the number do not race for the same slot); a longer wait
# takes nothing. Slots are thus taken in time order, which is what GCRA's bound needs. An interval of 0 turns its
# limit off. -> {1 reserved | 0 not, wait µs (string), the limit that set the wait: 0 none, 1 number, 2 recipient}
PACE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat, allowed = {}, {}
for i = 1, 2 do
  if tonumber(ARGV[2 * i - 1]) > 0 then
    tat[i] = math.max(tonumber(redis.call('GET', KEYS[i]) or '0'), now)
    allowed[i] = tat[i] - tonumber(ARGV[2 * i])
  end
end
if allowed[2] and allowed[2] > now then return {0, string.format('%d', allowed[2] - now), 2} end
local at, by = now, 0
if allowed[1] and allowed[1] > now then at, by = allowed[1], 1 end
if at - now > tonumber(ARGV[5]) then return {0, string.format('%d', at - now), by} end
for i = 1, 2 do
  if tat[i] then
    local next_tat = math.max(tat[i], at) + tonumber(ARGV[2 * i - 1])
    redis.call('SET', KEYS[i], string.format('%d', next_tat), 'PX', math.floor((next_tat - now) / 1000) + 1)
  end
end
return {1, string.format('%d', at - now), by}
"""
