-- The data file does not exist.
experiment {
  name = "missing",
  data = { file = "no_such_file.txt" },
}
