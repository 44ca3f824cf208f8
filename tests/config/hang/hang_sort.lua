-- table.sort with a comparator that is slow inside a library function.
local t = {}
for i = 1, 64 do t[i] = string.rep("a", 3000) .. i end
table.sort(t, function(a, b) return a:find(string.rep("a-", 8) .. "b") ~= nil or a < b end)
experiment { data = { file = "datasets/tinyshakespeare/input.txt" } }
