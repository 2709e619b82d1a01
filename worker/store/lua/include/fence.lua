-- holds(fence, token): the fence check every fenced script makes before it changes anything. True while ``token``
-- is the newest token given out on ``fence`` (see next_token), so no other worker took the lease over since.
local function holds(fence, token)
  return redis.call('GET', fence) == token
end
