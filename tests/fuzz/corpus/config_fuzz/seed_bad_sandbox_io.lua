-- Experiment files cannot open files.
local f = io.open("/etc/passwd")
experiment { data = { file = "x.txt" } }
