-- A __gc finalizer that never returns: it runs when the interpreter closes, after the script
-- is done, and Lua runs finalizers with hooks off.
setmetatable({}, { __gc = function() while true do end end })
experiment { data = { file = "datasets/tinyshakespeare/input.txt" } }
