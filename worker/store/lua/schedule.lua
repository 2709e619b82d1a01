-- SCHEDULE: hold one input until it is due, unless its id is held already or was accepted before.
-- KEYS: timers, timed, seen, tomb, then rest: the due index (when index_member is set)
-- ARGV: id, held (two flag characters, then the mailbox entry), due_ms, max_timers, index_member ('' on a Cluster,
--       where the due index lives in another slot and the caller updates it around the script)
-- Returns: {SCHEDULED | DUPLICATE | FULL, timers held after it}
-- Nothing is held for a refused or duplicate input. The due index's score is the conversation's earliest due time:
-- a new timer can only lower it.
--! include tail
--! include codes
local timers = KEYS[1]
local timed = KEYS[2]
local seen = KEYS[3]
local tomb = KEYS[4]
local rest = tail(KEYS, 5)
local id = ARGV[1]
local held = ARGV[2]
local due_ms = ARGV[3]
local max_timers = ARGV[4]
local index_member = ARGV[5]

if redis.call('HEXISTS', timed, id) == 1 or redis.call('ZSCORE', seen, id) or redis.call('ZSCORE', tomb, id) then
  return {DUPLICATE, redis.call('ZCARD', timers)}
end
local n = redis.call('ZCARD', timers)
if n >= tonumber(max_timers) then
  return {FULL, n}
end
redis.call('HSET', timed, id, held)
redis.call('ZADD', timers, tonumber(due_ms), id)
if index_member ~= '' then
  redis.call('ZADD', rest[1], 'LT', tonumber(due_ms), index_member)
end
return {ACCEPTED, n + 1}
