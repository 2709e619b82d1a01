-- The steps of taking one input into a mailbox, shared by ACCEPT and FIRE_TIMERS (which accepts due timers the same
-- way), so the two cannot drift apart on what a duplicate is, when the window opens or what ends a burst's hold.

-- seen_before(seen, tomb, id): the id was accepted before, or belongs to a deleted conversation (its tombstone).
local function seen_before(seen, tomb, id)
  return redis.call('ZSCORE', seen, id) or redis.call('ZSCORE', tomb, id)
end

-- mark_pending(pending, member, now, was_empty): the sweeper's idle clock starts when work appears. An input into an
-- empty mailbox stamps the mark anew (so a sweeper that read the old score and an empty mailbox cannot remove it);
-- one behind waiting inputs only makes sure the mark is there (stamping it would hide a dead worker's conversation
-- while its player keeps writing).
local function mark_pending(pending, member, now, was_empty)
  if was_empty then
    redis.call('ZADD', pending, now, member)
  else
    redis.call('ZADD', pending, 'NX', now, member)
  end
end

-- open_window(inbound, now_ms): the player wrote at now_ms; the window's time only moves forward, whatever order
-- producers' calls land in. Returns true when this message is the player's latest (none came later).
local function open_window(inbound, now_ms)
  local now = tonumber(now_ms)
  local last = tonumber(redis.call('GET', inbound) or '0')
  if now > last then
    redis.call('SET', inbound, now_ms)
  end
  return now >= last
end

-- end_burst_hold(hold): a game event the model answers ends a burst's quiet period ('b', set by DEFER); a retry's
-- hold ('1') stays, its backoff is not the event's to cut. Returns 1 when it ended one.
local function end_burst_hold(hold)
  if redis.call('GET', hold) == 'b' then
    redis.call('DEL', hold)
    return 1
  end
  return 0
end

-- refresh_ttl(keys, from, ttl_ms): the idle TTL restarts on every key of the conversation from position ``from``.
local function refresh_ttl(keys, from, ttl_ms)
  local ttl = tonumber(ttl_ms)
  if ttl > 0 then
    for i = from, #keys do redis.call('PEXPIRE', keys[i], ttl) end
  end
end
