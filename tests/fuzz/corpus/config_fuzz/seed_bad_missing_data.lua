-- No data at all.
experiment {
  name = "nodata",
  learners = { count = 2 },
}
