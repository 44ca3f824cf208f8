--@set sync.min_quorum=2
--@set outer.lr=fraction(1/2)
--@set data.file=x.txt
experiment { name = "o", data = { file = "d.txt" }, learners = { count = 4 },
  chaos = { events = { { at_step = 5, action = "kill", target = 1 } } } }
