-- READ_STATE: the state blob and version, read together without a lease (compaction, inspection).
-- KEYS: state, blob_key
-- ARGV: have (the tag of the state the caller holds, '' none: then the blob is always sent)
-- Returns: {blob (its parts, see stored_blob) or false (none, or the caller's), version, tag}
-- The blob is blob_key's (a base and the frames appended to it); a state last written whole in the older layout is
-- still in the state hash's blob field until its next write.
--! include stored_blob
local state = KEYS[1]
local blob_key = KEYS[2]
local have = ARGV[1]

local s = redis.call('HMGET', state, 'blob', 'version', 'tag')
local tag = s[3] or ''
if have ~= '' and tag == have then return {false, s[2] or '0', tag} end
return {stored_blob(blob_key, s[1]), s[2] or '0', tag}
