-- DEAD_REPLY: move the outbox head to the dead letters.
-- KEYS: dfence, outbox, sent, dead, record_stream, record_dropped
-- ARGV: token, reply_id, dead_entry, dead_max, record_entry ('' none), record_max
-- Returns: 1, FENCE_MOVED or NOT_HEAD
--! include head_id
--! include fence
--! include append_record
--! include append_capped
--! include codes
local dfence = KEYS[1]
local outbox = KEYS[2]
local sent = KEYS[3]
local dead = KEYS[4]
local record_stream = KEYS[5]
local record_dropped = KEYS[6]
local token = ARGV[1]
local reply_id = ARGV[2]
local dead_entry = ARGV[3]
local dead_max = ARGV[4]
local record_entry = ARGV[5]
local record_max = ARGV[6]

if not holds(dfence, token) then return FENCE_MOVED end
if head_id(redis.call('LINDEX', outbox, 0)) ~= reply_id then return NOT_HEAD end
append_record(record_stream, record_dropped, record_max, 'f:' .. token .. ':' .. reply_id, record_entry)
redis.call('LPOP', outbox)
redis.call('DEL', sent)
append_capped(dead, dead_entry, dead_max)
return 1
