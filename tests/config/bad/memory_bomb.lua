-- A string that doubles until memory runs out.
local s = "x"
while true do s = s .. s end
