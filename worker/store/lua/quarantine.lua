-- QUARANTINE: set an unusable state blob aside (capped list) and clear the state.
-- KEYS: fence, state, quarantine, blob_key
-- ARGV: token, expected_version, record, max_kept
-- Returns: {new version, 0}, {FENCE_MOVED, 0} or {VERSION_MOVED, the current version}
--! include fence
--! include append_capped
--! include codes
local fence = KEYS[1]
local state = KEYS[2]
local quarantine = KEYS[3]
local blob_key = KEYS[4]
local token = ARGV[1]
local expected_version = ARGV[2]
local record = ARGV[3]
local max_kept = ARGV[4]

if not holds(fence, token) then return {FENCE_MOVED, 0} end
local v = tonumber(redis.call('HGET', state, 'version') or '0')
if v ~= tonumber(expected_version) then return {VERSION_MOVED, v} end
append_capped(quarantine, record, max_kept)
redis.call('HDEL', state, 'blob', 'tag', 'blen')
redis.call('DEL', blob_key)
redis.call('HSET', state, 'version', v + 1)
return {v + 1, 0}
