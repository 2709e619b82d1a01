-- REPLAY: move one dead letter back to a list, if it is still the entry the caller read at that index.
-- KEYS: dead, target
-- ARGV: index, expected, entry
-- Returns: 1 moved, 0 the dead letter changed meanwhile
local dead = KEYS[1]
local target = KEYS[2]
local index = ARGV[1]
local expected = ARGV[2]
local entry = ARGV[3]

local cur = redis.call('LINDEX', dead, tonumber(index))
if cur ~= expected then return 0 end
redis.call('LSET', dead, tonumber(index), '__parley_replayed__')
redis.call('LREM', dead, 1, '__parley_replayed__')
redis.call('RPUSH', target, entry)
return 1
