-- The codes a script answers with in its first element. worker/store/codes.py names the same numbers for Python
-- (tests/store/test_lua_files.py keeps the two in step).
-- A refusal: the script changed nothing.
local FENCE_MOVED = -1    -- another worker took a newer token on the fence
local VERSION_MOVED = -2  -- the state's version is not the one the caller read
local NOT_HEAD = -3       -- the input (or reply) is no longer at the head of its list
local JOURNAL_FULL = -4   -- the turn journal is at its bound; the entry was not kept
-- No lease taken (BEGIN, and a delivery's start): nothing waits, another worker holds the lease, or a hold is set.
local EMPTY = 0
local BUSY = -1
local HELD = -2
-- ACCEPT.
local ACCEPTED = 1
local DUPLICATE = 0
local FULL = -1
