-- An error handler (xpcall) that never returns; it spends its time in a library function.
local s = string.rep("a", 5000)
xpcall(error, function() return s:find(string.rep("a-", 12) .. "b") end)
experiment { data = { file = "datasets/tinyshakespeare/input.txt" } }
