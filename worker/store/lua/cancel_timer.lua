-- CANCEL_TIMER: drop one held input that is not yet due (it was not accepted into the mailbox).
-- KEYS: timers, timed
-- ARGV: id
-- Returns: 1 cancelled, 0 no such timer held (never scheduled, already due and accepted, or cancelled before)
-- The due index is left as it is: its score may be early, which costs the timer loop one pass that finds nothing.
local timers = KEYS[1]
local timed = KEYS[2]
local id = ARGV[1]

redis.call('HDEL', timed, id)
return redis.call('ZREM', timers, id)
