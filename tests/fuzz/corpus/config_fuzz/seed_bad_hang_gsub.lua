-- Few Lua instructions, each a long library call: string.gsub over a megabyte, forever.
local s = string.rep("x", 1 << 20)
while true do
  s = s:gsub("x", "x")
end
