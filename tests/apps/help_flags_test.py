#!/usr/bin/env python3
"""Every binary's --help lists every flag it takes, and takes every flag it lists.

For each binary (each command of dd-node and dd-chaos, dd-goodput, the benchmarks, dd-gpu-check
where built) `BIN [COMMAND] --help` must exit 0 with the help on stdout, starting "usage: ". The
candidates are the flag literals ("--word") of the source files that parse its arguments. Each
candidate that the help does not list as an entry (a line starting with two spaces and the flag)
is given to the binary as
`BIN [COMMAND] CANDIDATE --help --help`: the parser must refuse it as an unknown flag (a flag it
takes would instead consume a value, print its help or fail on the value). And each flag the help
lists must be one the parser takes. Nothing runs past the parser: the trailing --help ends every
accepted command line.

usage: help_flags_test.py REPO_ROOT NAME=BINARY...   (NAME: dd-node, dd-chaos, dd-goodput, ...)
"""
import concurrent.futures
import glob
import os
import re
import subprocess
import sys

FLAG = re.compile(r'"(--[a-z][a-z0-9-]*)')
# A flag's own entry in the help: two spaces, then the flag (a wrapped description line is
# indented further, so a flag it mentions is not listed by it).
LISTED = re.compile(r"^  (?:-h, )?(--[a-z][a-z0-9-]*)", re.MULTILINE)


def literals(paths):
    found = set()
    for p in paths:
        with open(p, encoding="utf-8") as f:
            found.update(FLAG.findall(f.read()))
    return found


def run(argv):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30,
                       stdin=subprocess.DEVNULL)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def listed(help_text):
    return set(LISTED.findall(help_text))


def main():
    root = sys.argv[1]
    bins = dict(a.split("=", 1) for a in sys.argv[2:])
    src = lambda *globs: sorted({p for g in globs for p in glob.glob(os.path.join(root, g))})
    cases = []  # (what, argv prefix, source files of its parser)

    # dd-node: each command's parser is in the file defining <command>_main, with the shared
    # flag builders (node_flags.cpp) and the flag table.
    node = bins["dd-node"]
    rc, out, _ = run([node, "--help"])
    commands = re.findall(r"^  ([a-z]+)\s", out, re.MULTILINE)
    assert rc == 0 and len(commands) >= 10, f"dd-node --help: {rc}\n{out}"
    shared = src("apps/dd_node/node_flags.cpp", "util/flags.cpp")
    for c in commands:
        files = [p for p in src("apps/dd_node/*.cpp", "runtime/config/*.cpp")
                 if re.search(rf"\bint {c}_main\(|\b{c}_command\(", open(p).read())]
        assert files, f"dd-node {c}: no source file defines {c}_main"
        cases.append((f"dd-node {c}", [node, c], files + shared))

    # dd-chaos: one flag table per command, all in tools/chaos.
    chaos = bins.get("dd-chaos")
    if chaos:
        rc, out, _ = run([chaos, "--help"])
        body = out.split("\nFlags")[0]
        commands = sorted(set(re.findall(r"^  ([a-z]+)\b", body, re.MULTILINE)))
        assert rc == 0 and len(commands) >= 10, f"dd-chaos --help: {rc}\n{out}"
        for c in commands:
            cases.append((f"dd-chaos {c}", [chaos, c], src("tools/chaos/*.cpp")))

    bench = lambda name: src(f"tools/bench/{name}.cpp", "tools/bench/bench_util.hpp")
    singles = {
        "dd-goodput": src("tools/goodput/*.cpp"),
        "dd-gpu-check": src("tools/gpu_check/*.cpp"),
        "dd-bench-train": bench("bench_train"),
        "dd-bench-sync": bench("bench_sync"),
        "dd-bench-transport": bench("bench_transport"),
        "dd-bench-receive": bench("bench_receive"),
        "dd-bench-metrics": bench("bench_metrics"),
    }
    for name, files in singles.items():
        if name in bins:
            cases.append((name, [bins[name]], files + src("util/flags.cpp")))

    probes = []  # (what, candidate, argv, must be accepted)
    bad_help = []
    for what, prefix, files in cases:
        rc, out, err = run(prefix + ["--help"])
        if rc != 0 or not out.startswith(f"usage: {what}") or err:
            bad_help.append(f"{what} --help: exit {rc}, stdout:\n{out}\nstderr:\n{err}")
            continue
        shown = listed(out)
        assert shown, f"{what} --help lists no flag:\n{out}"
        for cand in sorted(literals(files) - shown - {"--help"}):
            probes.append((what, cand, prefix + [cand, "--help", "--help"], False))
        for flag in sorted(shown - {"--help"}):
            probes.append((what, flag, prefix + [flag, "--help", "--help"], True))

    failures = []

    def probe(p):
        what, cand, argv, want = p
        _, out, err = run(argv)
        taken = f"unknown flag '{cand}'" not in err
        if taken != want:
            return (f"{what}: takes {cand} but its --help does not list it" if taken else
                    f"{what}: --help lists {cand} but the parser refuses it") + f"\n  {err.strip()}"
        return None

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        failures = [f for f in pool.map(probe, probes) if f]
    failures = bad_help + failures
    print(f"{len(cases)} commands, {len(probes)} probes")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
