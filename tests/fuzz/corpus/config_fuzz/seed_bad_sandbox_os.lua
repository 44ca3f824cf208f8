-- Experiment files cannot run processes.
os.execute("touch /tmp/dd_config_pwned")
experiment { data = { file = "x.txt" } }
