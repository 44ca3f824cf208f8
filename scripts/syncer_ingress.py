#!/usr/bin/env python3
"""What one syncer node must take in, against what a core and a NIC sustain
(docs/benchmarks-sync.md, "Where one syncer stops scaling").

Every learner pushes its whole model once per H inner steps (P fragments, one every H/P steps)
and every merge goes back to each of the M learners, so one syncer process receives

    ingress = M * N * b / (H * t_step)   bytes per second

(N parameters, b bytes per parameter on the wire) and sends M * N * b_bc / (H * t_step) as
broadcasts. Every pushed value is decoded to fp32 and merged once: the merge reads
M * N * 4 / (H * t_step) bytes per second. The rates of one core come from the benchmarks
(measured in the same run as their baselines):

    --merge-gbps    dd-bench-sync --part merge, "outer_step rda" GB/s on --threads 1
    --stream-mibps  dd-bench-transport, "push" (tensor channel) MiB/s: one push stream

Prints one Markdown table; every figure scales with 1 / t_step.
"""
import argparse
import sys

BYTES = {"fp32": 4.0, "bf16": 2.0, "int4": 36.0 / 64.0}  # int4: 32 bytes + a float32 scale per 64
NIC_GBPS = {"10 Gbit": 1.25, "100 Gbit": 12.5}  # GB/s, one direction


def parse_size(text):
    mult = {"M": 1e6, "B": 1e9}
    if not text or text[-1] not in mult:
        raise argparse.ArgumentTypeError(f"model size '{text}': expected a number and M or B, "
                                         "e.g. 0.1B, 70B")
    try:
        value = float(text[:-1]) * mult[text[-1]]
    except ValueError:
        raise argparse.ArgumentTypeError(f"model size '{text}': not a number before {text[-1]}")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"model size '{text}': must be > 0")
    return value


def positive(kind):
    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a {kind.__name__}")
        if v <= 0:
            raise argparse.ArgumentTypeError(f"'{text}' must be > 0")
        return v
    return parse


def fmt(x):
    """Three significant digits, no exponent for the table's range."""
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--merge-gbps", type=positive(float), required=True,
                    help="merge GB/s of fp32 contributions on one core (dd-bench-sync)")
    ap.add_argument("--stream-mibps", type=positive(float), required=True,
                    help="one push stream's MiB/s on the tensor channel (dd-bench-transport)")
    ap.add_argument("--models", default="0.1B,1B,7B,70B",
                    help="model sizes, comma-separated (default 0.1B,1B,7B,70B)")
    ap.add_argument("--learners", default="2,4,8,16", help="M values (default 2,4,8,16)")
    ap.add_argument("--interval", type=positive(int), default=24, help="H (default 24)")
    ap.add_argument("--step-s", type=positive(float), default=1.0,
                    help="t_step, seconds per inner step (default 1)")
    args = ap.parse_args(argv)
    try:
        models = [parse_size(m) for m in args.models.split(",")]
        ms = [positive(int)(m) for m in args.learners.split(",")]
    except argparse.ArgumentTypeError as e:
        ap.error(str(e))

    stream_gbps = args.stream_mibps * 2**20 / 1e9
    encs = list(BYTES)
    print(f"H = {args.interval}, t_step = {args.step_s:g} s; one core: merge "
          f"{args.merge_gbps:g} GB/s of fp32, push stream {args.stream_mibps:g} MiB/s = "
          f"{stream_gbps:.3g} GB/s; NIC 10 Gbit = 1.25 GB/s, 100 Gbit = 12.5 GB/s each way\n")
    print("| model N | M | ingress GB/s " + " / ".join(encs) + " | merge cores | push-stream cores "
          + " / ".join(encs) + " | 10 Gbit NICs in " + " / ".join(encs)
          + " | 100 Gbit NICs in " + " / ".join(encs) + " | fp32 broadcasts out: 10 / 100 Gbit NICs |")
    print("|---" * 8 + "|")
    for n in models:
        label = f"{n / 1e9:g}B"
        for m in ms:
            per_s = m * n / (args.interval * args.step_s)  # parameters per second into the syncer
            ingress = {e: per_s * b / 1e9 for e, b in BYTES.items()}
            merge_cores = per_s * 4 / 1e9 / args.merge_gbps
            cells = [
                label, str(m), " / ".join(fmt(ingress[e]) for e in encs), fmt(merge_cores),
                " / ".join(fmt(ingress[e] / stream_gbps) for e in encs),
                " / ".join(fmt(ingress[e] / NIC_GBPS["10 Gbit"]) for e in encs),
                " / ".join(fmt(ingress[e] / NIC_GBPS["100 Gbit"]) for e in encs),
                f"{fmt(ingress['fp32'] / NIC_GBPS['10 Gbit'])} / "
                f"{fmt(ingress['fp32'] / NIC_GBPS['100 Gbit'])}",
            ]
            print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
