-- SET_IF_SCORE: move a member of a global zset to a new score (or remove it) only if its score is still the one
-- the caller read (the timer loop's update of the due index on a Cluster, where it cannot be in the firing script).
-- KEYS: zset
-- ARGV: member, score (as read), new_score ('' removes the member)
-- Returns: 1 changed, else 0
local zset = KEYS[1]
local member = ARGV[1]
local score = ARGV[2]
local new_score = ARGV[3]

local s = redis.call('ZSCORE', zset, member)
if not (s and tonumber(s) == tonumber(score)) then return 0 end
if new_score == '' then return redis.call('ZREM', zset, member) end
redis.call('ZADD', zset, tonumber(new_score), member)
return 1
