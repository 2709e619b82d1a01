-- PACE: GCRA, two limits at once, on Redis's clock (so workers on hosts whose clocks differ share one schedule).
-- KEYS: number_bucket, recipient_bucket (one hash tag: the number's)
-- ARGV: number_interval_us, number_tolerance_us, recipient_interval_us, recipient_tolerance_us, max_wait_us
-- Returns: {1 reserved | 0 not, wait µs (string), the limit that set the wait: 0 none, 1 number, 2 recipient}
-- Each bucket keeps its theoretical arrival time (TAT); a send may go once now >= TAT - tolerance in both. A
-- recipient who must wait takes nothing: the caller waits and asks again (reserving it would move the number's
-- schedule to that player's slot, and one player's pair wait would hold everyone's messages back). When the
-- recipient may have one, a wait for the number up to max_wait reserves the slot (both TATs move past it; the caller
-- sleeps, then sends without asking again, so workers waiting for the number do not race for the same slot); a
-- longer wait takes nothing. Slots are thus taken in time order, which is what GCRA's bound needs. An interval of 0
-- turns its limit off.
local number_bucket = KEYS[1]
local recipient_bucket = KEYS[2]
local number_interval_us = ARGV[1]
local number_tolerance_us = ARGV[2]
local recipient_interval_us = ARGV[3]
local recipient_tolerance_us = ARGV[4]
local max_wait_us = ARGV[5]

-- The two limits, 1 the number's and 2 the recipient's (the code the answer names the wait's limit by).
local buckets = {number_bucket, recipient_bucket}
local intervals = {tonumber(number_interval_us), tonumber(recipient_interval_us)}
local tolerances = {number_tolerance_us, recipient_tolerance_us}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat, allowed = {}, {}
for i = 1, 2 do
  if intervals[i] > 0 then
    tat[i] = math.max(tonumber(redis.call('GET', buckets[i]) or '0'), now)
    allowed[i] = tat[i] - tonumber(tolerances[i])
  end
end
if allowed[2] and allowed[2] > now then return {0, string.format('%d', allowed[2] - now), 2} end
local at, by = now, 0
if allowed[1] and allowed[1] > now then at, by = allowed[1], 1 end
if at - now > tonumber(max_wait_us) then return {0, string.format('%d', at - now), by} end
for i = 1, 2 do
  if tat[i] then
    local next_tat = math.max(tat[i], at) + intervals[i]
    redis.call('SET', buckets[i], string.format('%d', next_tat), 'PX', math.floor((next_tat - now) / 1000) + 1)
  end
end
return {1, string.format('%d', at - now), by}
