-- The stream inlet's pending index (worker/inlet/read.lua, held.lua): a member is '<conversation id>\0<entry id>'
-- with both parts of the entry id zero-padded to 20 digits, so one conversation's members sort by entry id.
-- padded(id): '1700000000000-3' as '00000001700000000000-00000000000000000003'; member_id(member): the entry id back.
local function pad20(digits)
  return string.rep('0', 20 - #digits) .. digits
end

local function padded(id)
  local ms, seq = string.match(id, '^(%d+)%-(%d+)$')
  return pad20(ms) .. '-' .. pad20(seq)
end

local function unpad(digits)
  local trimmed = string.gsub(digits, '^0+', '')
  if trimmed == '' then return '0' end
  return trimmed
end

local function member_id(member)
  local id = string.sub(member, -41)
  return unpad(string.sub(id, 1, 20)) .. '-' .. unpad(string.sub(id, 22, 41))
end
