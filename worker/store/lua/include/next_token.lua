-- next_token(fence): a new fencing token. A missing fence (new conversation, or deleted, or expired after the idle
-- TTL) starts from the clock in microseconds, so a token from an earlier life of the conversation, held by a worker
-- stalled since, can never match again. Tokens travel as decimal strings: a Lua number would print as 1.79e+15.
local function next_token(fence)
  if redis.call('EXISTS', fence) == 0 then
    local now = redis.call('TIME')
    redis.call('SET', fence, now[1] .. string.format('%06d', tonumber(now[2])))
  end
  return string.format('%d', redis.call('INCR', fence))
end
