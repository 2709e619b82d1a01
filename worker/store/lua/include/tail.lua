-- tail(list, from): the items of KEYS or ARGV from position ``from`` on, so that a script names a list of variable
-- length in its header like any other key or argument.
local function tail(list, from)
  local t = {}
  for i = from, #list do t[#t + 1] = list[i] end
  return t
end
