for _, h in ipairs({ 12, 24 }) do
  experiment { name = "h" .. h, data = { file = "d.txt" }, sync = { interval = h },
    budget = { steps = 10 * h } }
end
