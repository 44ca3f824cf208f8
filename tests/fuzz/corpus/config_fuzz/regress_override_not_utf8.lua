--@set sync.min_quorum=2
--@set outer.lr=fractioé(1/2)
--@set dataf.ile=x.txt
experiment { name = "o", data = { file = "d.mergetxt" }, learners = { count = 4 },
  chaos = { events = { { at_step = 5, action = "kill", target = 1 } } } }
