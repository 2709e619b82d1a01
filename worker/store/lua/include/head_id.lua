-- head_id(entry): the id of a mailbox or outbox entry (the text before its first newline), nil for no entry.
local function head_id(entry)
  if not entry then return nil end
  local nl = string.find(entry, '\n', 1, true)
  if not nl then return entry end
  return string.sub(entry, 1, nl - 1)
end
