-- rank(status): how far along a delivery status is. Meta sends statuses in no particular order and retries old ones
-- for a day and a half (a `read` may come before its `delivered`, or alone), so a status is kept only when it ranks
-- above the one kept: sent < delivered < read, and failed is final. A status Meta may add later ranks 0: kept only
-- while nothing better is known.
local RANKS = {sent = 1, delivered = 2, read = 3, failed = 4}
local function rank(status)
  if not status then return -1 end
  return RANKS[status] or 0
end
