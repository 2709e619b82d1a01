-- DELETE_KEEPING_TOMBSTONE: delete a conversation, keeping the input ids it had seen in a tombstone.
-- KEYS: tomb, record_stream, record_dropped, seen, then doomed: every other key of the conversation to delete
-- ARGV: now_ms, tomb_ms, tomb_max, record_id, record_entry ('' none), record_max
-- Returns: {ids in the tombstone, the delete record's stream id (false when the record is off)}
-- The durable record gets the delete too, behind everything the conversation recorded before it: the exporter
-- erases the conversation from PostgreSQL when it reaches it, so a deletion reaches the database from any caller.
-- The tombstone is scored by the delete time and expires after tomb_ms, so a retried webhook of the deleted
-- conversation dedupes instead of starting it again. Ids tombstoned longer ago than tomb_ms go first, then the
-- oldest beyond tomb_max. tomb_ms 0: no tombstone.
--! include tail
--! include append_record
local tomb = KEYS[1]
local record_stream = KEYS[2]
local record_dropped = KEYS[3]
local seen = KEYS[4]
local doomed = tail(KEYS, 5)
local now_ms = ARGV[1]
local tomb_ms = ARGV[2]
local tomb_max = ARGV[3]
local record_id = ARGV[4]
local record_entry = ARGV[5]
local record_max = ARGV[6]

local now, keep_ms = tonumber(now_ms), tonumber(tomb_ms)
local recorded = append_record(record_stream, record_dropped, record_max, record_id, record_entry) or false
if keep_ms > 0 then
  local ids = redis.call('ZRANGE', seen, 0, -1)
  for i = 1, #ids do redis.call('ZADD', tomb, now, ids[i]) end
  redis.call('ZREMRANGEBYSCORE', tomb, '-inf', now - keep_ms)
  local c = redis.call('ZCARD', tomb)
  local max = tonumber(tomb_max)
  if c > max then redis.call('ZREMRANGEBYRANK', tomb, 0, c - max - 1) end
  if #ids > 0 then redis.call('PEXPIRE', tomb, keep_ms) end
end
redis.call('DEL', seen)
for i = 1, #doomed do redis.call('DEL', doomed[i]) end
return {redis.call('ZCARD', tomb), recorded}
