-- ZREM_IF_SCORE: remove a member of the pending zset only if its score is still the one the caller read.
-- KEYS: pending
-- ARGV: member, score
-- Returns: 1 removed, else 0
local pending = KEYS[1]
local member = ARGV[1]
local score = ARGV[2]

local s = redis.call('ZSCORE', pending, member)
if s and tonumber(s) == tonumber(score) then return redis.call('ZREM', pending, member) end
return 0
