-- append_capped(list, entry, max): append to a capped list (trace, dead letters, quarantine, delivered), keeping its
-- ``max`` newest entries.
local function append_capped(list, entry, max)
  redis.call('RPUSH', list, entry)
  redis.call('LTRIM', list, -tonumber(max), -1)
end
