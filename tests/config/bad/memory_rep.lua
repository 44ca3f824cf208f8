-- One library call asking for a gigabyte.
local s = string.rep("x", 1 << 30)
experiment { data = { file = "datasets/tinyshakespeare/input.txt" } }
