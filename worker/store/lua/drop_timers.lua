-- DROP_TIMERS: drop every timer the conversation holds, for a reset sent at once, unless that reset is a duplicate.
-- KEYS: timers, timed, seen, tomb
-- ARGV: id (the reset's message id)
-- Returns: {timers dropped, 1 when the reset's id was accepted before (nothing dropped), else 0}
-- A producer's retry of a reset (the same message id, after a timeout) is a duplicate ACCEPT ignores: it must not
-- drop the timers the game held after the first one joined the order.
--! include take_in
local timers = KEYS[1]
local timed = KEYS[2]
local seen = KEYS[3]
local tomb = KEYS[4]
local id = ARGV[1]

if seen_before(seen, tomb, id) then
  return {0, 1}
end
local n = redis.call('ZCARD', timers)
redis.call('DEL', timers, timed)
return {n, 0}
