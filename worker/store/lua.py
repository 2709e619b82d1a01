"""The Lua scripts. Each touches only the keys of one conversation (one hash tag), so each runs atomically
on a standalone Redis and on a Cluster. Return codes: a negative first element is a refusal."""

HEAD_ID = """
local function head_id(entry)
  if not entry then return nil end
  local nl = string.find(entry, '\\n', 1, true)
  if not nl then return entry end
  return string.sub(entry, 1, nl - 1)
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


# KEYS: inbox, seen, [pending,] then every key of the conversation when an idle TTL is set
# ARGV: id, entry, now_ms, max_inbox, dedupe_max, dedupe_ms, ttl_ms, pending member ('' on a Cluster, where the
#       pending zset lives in another slot and the caller adds to it separately)
ACCEPT = """
local first_ttl = 3
if ARGV[8] ~= '' then
  redis.call('ZADD', KEYS[3], tonumber(ARGV[3]), ARGV[8])
  first_ttl = 4
end
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  return {0, redis.call('LLEN', KEYS[1])}
end
local n = redis.call('LLEN', KEYS[1])
if n >= tonumber(ARGV[4]) then
  return {-1, n}
end
local now = tonumber(ARGV[3])
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

# KEYS: lease, fence   ARGV: lease_ms
ACQUIRE = NEXT_TOKEN + """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local t = next_token(KEYS[2])
redis.call('SET', KEYS[1], t, 'PX', ARGV[1])
return t
"""

# KEYS: hold, inbox, lease, fence, state, attempts   ARGV: lease_ms
# One round trip to start draining: {-2} held for a retry, {0} nothing waiting, {-1} another worker holds the
# lease; else take the lease and return {token, head entry, blob, version, attempts at the head}.
BEGIN = HEAD_ID + NEXT_TOKEN + """
if redis.call('EXISTS', KEYS[1]) == 1 then return {-2} end
local head = redis.call('LINDEX', KEYS[2], 0)
if not head then return {0} end
if redis.call('EXISTS', KEYS[3]) == 1 then return {-1} end
local t = next_token(KEYS[4])
redis.call('SET', KEYS[3], t, 'PX', ARGV[1])
local s = redis.call('HMGET', KEYS[5], 'blob', 'version')
local a = redis.call('HINCRBY', KEYS[6], head_id(head), 1)
return {t, head, s[1], s[2] or '0', a}
"""

# KEYS: inbox, state   -> {head entry or false, blob or false, version}
HEAD = """
local head = redis.call('LINDEX', KEYS[1], 0)
local s = redis.call('HMGET', KEYS[2], 'blob', 'version')
return {head, s[1], s[2] or '0'}
"""

# KEYS: fence, attempts   ARGV: token, field, delta
NOTE_ATTEMPT = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
return redis.call('HINCRBY', KEYS[2], ARGV[2], tonumber(ARGV[3]))
"""


# Claiming the outbox head for a send: which part is next, whether a part was left in flight by a crash
# (so it may already have reached the user), and the in-flight mark for the part about to be sent, written
# before the send. When the outbox is empty the delivery lease is given up in the same script, so a reply
# committed meanwhile cannot be left without a deliverer (the delivery side of the lost wake-up).
CLAIM = HEAD_ID + """
local function claim(outbox, sent, dlease, token, lease_ms)
  local head = redis.call('LINDEX', outbox, 0)
  if not head then
    if redis.call('GET', dlease) == token then redis.call('DEL', dlease) end
    return {0}
  end
  local rid = head_id(head)
  local p = redis.call('HMGET', sent, 'reply_id', 'part', 'inflight')
  local part = 0
  if p[1] == rid and p[2] then part = tonumber(p[2]) end
  local crashed = 0
  if p[1] == rid and p[3] == rid .. ':' .. part then crashed = 1 end
  redis.call('HSET', sent, 'reply_id', rid, 'part', part, 'inflight', rid .. ':' .. part)
  redis.call('SET', dlease, token, 'PX', lease_ms)
  return {1, head, part, crashed}
end
"""

# Starting a delivery: take the delivery lease with a fresh fencing token and claim the outbox head. Returns
# {-1} when another worker delivers, {0} when nothing waits, else {token, head entry, part, crashed}. Shared by
# BEGIN_DELIVERY and by the commit that ends a drain, so both start a delivery the same way.
START_DELIVERY = CLAIM + NEXT_TOKEN + """
local function start_delivery(dlease, dfence, outbox, sent, lease_ms)
  if redis.call('EXISTS', dlease) == 1 then return {-1} end
  if redis.call('LLEN', outbox) == 0 then return {0} end
  local t = next_token(dfence)
  local c = claim(outbox, sent, dlease, t, lease_ms)
  return {t, c[2], c[3], c[4]}
end
"""

# KEYS: fence, state, inbox, attempts, outbox, trace, dead, lease, dlease, dfence, sent, then every key when an
#       idle TTL is set
# ARGV: token, expected_version, input_id, state_mode (keep|set|clear), blob, reply_entry, trace_entry,
#       dead_entry, lease_ms, trace_max, dead_max, ttl_ms, advance ('1'), claim_ms ('' or the delivery lease)
# With advance and claim_ms, a commit that empties the mailbox also starts the delivery when nobody delivers:
# it takes the delivery lease and claims the outbox head as BEGIN_DELIVERY does, and returns
# {version, 0, 1, token, head entry, part, crashed}, saving the deliverer that round trip.
COMMIT = START_DELIVERY + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {-1, 0} end
local v = tonumber(redis.call('HGET', KEYS[2], 'version') or '0')
if v ~= tonumber(ARGV[2]) then return {-2, v} end
if head_id(redis.call('LINDEX', KEYS[3], 0)) ~= ARGV[3] then return {-3, v} end
local mode = ARGV[4]
if mode == 'set' then
  redis.call('HSET', KEYS[2], 'blob', ARGV[5])
elseif mode == 'clear' then
  redis.call('HDEL', KEYS[2], 'blob')
end
redis.call('HSET', KEYS[2], 'version', v + 1)
redis.call('LPOP', KEYS[3])
redis.call('HDEL', KEYS[4], ARGV[3], ARGV[3] .. ':retries')
if ARGV[6] ~= '' then redis.call('RPUSH', KEYS[5], ARGV[6]) end
if ARGV[7] ~= '' then
  redis.call('RPUSH', KEYS[6], ARGV[7])
  redis.call('LTRIM', KEYS[6], -tonumber(ARGV[10]), -1)
end
if ARGV[8] ~= '' then
  redis.call('RPUSH', KEYS[7], ARGV[8])
  redis.call('LTRIM', KEYS[7], -tonumber(ARGV[11]), -1)
end
local ttl = tonumber(ARGV[12])
if ttl > 0 then
  for i = 12, #KEYS do redis.call('PEXPIRE', KEYS[i], ttl) end
end
local depth = redis.call('LLEN', KEYS[3])
if ARGV[13] == '1' then
  -- Advance: hand back the next input (counting an attempt at it), or give the lease up when there is none.
  -- Atomic with the pop, so a producer's push either lands before (and is returned) or finds no lease.
  if depth == 0 then
    redis.call('DEL', KEYS[8])
    if ARGV[14] ~= '' then
      local d = start_delivery(KEYS[9], KEYS[10], KEYS[5], KEYS[11], ARGV[14])
      if #d > 1 then return {v + 1, 0, 1, d[1], d[2], d[3], d[4]} end  -- else: busy, or nothing to send
    end
    return {v + 1, 0, 1}
  end
  redis.call('SET', KEYS[8], ARGV[1], 'PX', ARGV[9])
  local nxt = redis.call('LINDEX', KEYS[3], 0)
  local a = redis.call('HINCRBY', KEYS[4], head_id(nxt), 1)
  if mode == 'keep' then
    return {v + 1, depth, 0, nxt, a, redis.call('HGET', KEYS[2], 'blob')}
  end
  return {v + 1, depth, 0, nxt, a}
end
redis.call('SET', KEYS[8], ARGV[1], 'PX', ARGV[9])
return {v + 1, depth}
"""

# KEYS: fence, lease, list (inbox or outbox)   ARGV: token, force
# Returns 1 ("keep draining") when work arrived while we were finishing: the producer who pushed it saw
# our lease and did not start a drain, so giving up the lease now would strand it.
RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] ~= '1' and redis.call('LLEN', KEYS[3]) > 0 then return 1 end
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
return 0
"""

# KEYS: fence, state, quarantine   ARGV: token, expected_version, record, max
QUARANTINE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {-1, 0} end
local v = tonumber(redis.call('HGET', KEYS[2], 'version') or '0')
if v ~= tonumber(ARGV[2]) then return {-2, v} end
redis.call('RPUSH', KEYS[3], ARGV[3])
redis.call('LTRIM', KEYS[3], -tonumber(ARGV[4]), -1)
redis.call('HDEL', KEYS[2], 'blob')
redis.call('HSET', KEYS[2], 'version', v + 1)
return {v + 1, 0}
"""

# KEYS: state   ARGV: expected_version, mode, blob
PUT_STATE = """
local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if v ~= tonumber(ARGV[1]) then return {-2, v} end
if ARGV[2] == 'set' then redis.call('HSET', KEYS[1], 'blob', ARGV[3]) else redis.call('HDEL', KEYS[1], 'blob') end
redis.call('HSET', KEYS[1], 'version', v + 1)
return {v + 1, 0}
"""

# KEYS: dfence, sent   ARGV: token, reply_id, part
MARK_INFLIGHT = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
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
MARK_SENT = HEAD_ID + IDS_WITH + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if head_id(redis.call('LINDEX', KEYS[2], 0)) ~= ARGV[2] then return -3 end
local ids = ids_with(KEYS[3], ARGV[2], ARGV[4])
redis.call('HSET', KEYS[3], 'reply_id', ARGV[2], 'part', tonumber(ARGV[3]) + 1, 'ids', ids)
redis.call('HDEL', KEYS[3], 'inflight')
redis.call('SET', KEYS[4], ARGV[1], 'PX', ARGV[5])
return 1
"""

# KEYS: dlease, dfence, outbox, sent   ARGV: lease_ms
# Start delivering in one round trip: {-1} another worker delivers, {0} nothing to send, else take the delivery
# lease and claim the head: {token, head entry, part, crashed}.
BEGIN_DELIVERY = START_DELIVERY + """
return start_delivery(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1])
"""

# KEYS: dfence, outbox, sent, dlease   ARGV: token, lease_ms
# Claim the next reply, or give the delivery lease up when the outbox is empty.
CLAIM_NEXT = CLAIM + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {-1} end
return claim(KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2])
"""

# KEYS: dfence, outbox, sent, delivered, dlease
# ARGV: token, reply_id, provider_id, delivered_max, lease_ms
# The last part of a reply was sent: record it, drop the reply from the outbox and claim the next one (or give
# the lease up), in one round trip.
SENT_LAST_CLAIM_NEXT = CLAIM + IDS_WITH + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {-1} end
if head_id(redis.call('LINDEX', KEYS[2], 0)) ~= ARGV[2] then return {-3} end
local ids = ids_with(KEYS[3], ARGV[2], ARGV[3])
redis.call('LPOP', KEYS[2])
redis.call('DEL', KEYS[3])
redis.call('RPUSH', KEYS[4], ARGV[2] .. '\\t' .. ids)
redis.call('LTRIM', KEYS[4], -tonumber(ARGV[4]), -1)
return claim(KEYS[2], KEYS[3], KEYS[5], ARGV[1], ARGV[5])
"""

# KEYS: dfence, outbox, sent, dead   ARGV: token, reply_id, dead_entry, dead_max
DEAD_REPLY = HEAD_ID + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if head_id(redis.call('LINDEX', KEYS[2], 0)) ~= ARGV[2] then return -3 end
redis.call('LPOP', KEYS[2])
redis.call('DEL', KEYS[3])
redis.call('RPUSH', KEYS[4], ARGV[3])
redis.call('LTRIM', KEYS[4], -tonumber(ARGV[4]), -1)
return 1
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


# ----- BEGIN service-helper block (issue 12): the lease heartbeat and per-reply delivery failures. -----------------
# Appended by the service helper so its branch runs; the store helper's version of the same spec replaces it.

# KEYS: fence, lease (or dfence, dlease)   ARGV: token, lease_ms
# The heartbeat of a running turn or delivery: 1 and the lease (re)set to the token while the fence still holds
# it (safe even after the lease expired: nobody took a newer token), else 0 and nothing changes.
RENEW_LEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return 1
"""

# KEYS: dfence, sent   ARGV: token, reply_id
# One failed (retryable) send of the outbox head reply, counted in its progress hash (deleted with the hash when
# the reply is sent or dead-lettered; restarted when the count belongs to another reply). -1 when the delivery
# fence moved, else the failures counted for this reply.
NOTE_DELIVERY_FAILURE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if redis.call('HGET', KEYS[2], 'failures_of') ~= ARGV[2] then
  redis.call('HSET', KEYS[2], 'failures_of', ARGV[2], 'failures', 0)
end
return redis.call('HINCRBY', KEYS[2], 'failures', 1)
"""
# ----- END service-helper block --------------------------------------------------------------------------------------
