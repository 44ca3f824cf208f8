-- data.file must name a file, not a folder.
experiment {
  data = { file = "." },
}
