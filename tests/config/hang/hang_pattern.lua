-- A backtracking pattern: string.find runs for ages inside one C call, where the instruction
-- limit never looks. Only the wall-clock limit (--script-timeout) stops it.
local s = string.rep("a", 5000)
local found = s:find(string.rep("a-", 12) .. "b")
experiment { data = { file = "datasets/tinyshakespeare/input.txt" } }
