-- The data file does not exist, named by an absolute path (looked for there only).
experiment {
  name = "missing",
  data = { file = "/nonexistent/no_such_file.txt" },
}
