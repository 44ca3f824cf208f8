#!/usr/bin/python3
"""Training speed: PyTorch (CPU) vs dd-node train on the same model shape and token count.

Runs the PyTorch twin (dd_gpt.py: same GPT-2 architecture, tied head, AdamW, grad clipping) at
each thread count in --torch-threads and keeps the best, then runs `dd-node train` at each count
in --dd-threads and keeps the best, and prints tokens/s for both and the ratio ours / PyTorch;
with --rounds R it does so R times, alternating which side goes first, and prints the medians.
Timings exclude start-up: PyTorch skips its first 3 steps; dd-node's tokens/s is the mean of its
step times (its progress lines), read from its last progress line.

Usage (from the repo root), under a venv with PyPI's torch 2.15 (Debian's python3-torch is 1.13):
    python3 -m venv /work/venv-torch && /work/venv-torch/bin/pip install 'torch==2.15.*'
    /work/venv-torch/bin/python tools/torch_reference/compare_speed.py --dd-node build/bin/dd-node \
        [--steps 60] [--layers 4 --heads 4 --width 128 --context 128 --batch 16]
The three shapes of docs/benchmarks.md: the defaults (0.84M parameters); --layers 6 --width 384
--heads 6 --context 256 --batch 8 (10.8M); --layers 8 --width 512 --heads 8 --context 256
--batch 8 (25M). PyPI's x86-64 torch wheel is the CUDA build (about 5 GB with its nvidia
packages); it runs on the CPU as well. The machine's vCPUs are shared with anything else
running: repeat and compare medians.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dd_gpt  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.path.join(ROOT, "datasets", "tinyshakespeare", "input.txt")


def torch_tokens_per_second(cfg, B, T, steps, threads, init):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    data = torch.tensor(list(open(DATA, "rb").read()), dtype=torch.int64)
    params = {k: v.clone() for k, v in init.items()}
    for p in params.values():
        p.requires_grad_(True)
    opt = dd_gpt.make_optimizer(params, 1e-3, 0.1)
    return dd_gpt.tokens_per_second(params, cfg, opt, data, B, T, steps,
                                    torch.Generator().manual_seed(0))


def dd_tokens_per_second(dd_node, B, T, steps, threads, cfg):
    cmd = [dd_node, "train", "--threads", str(threads), "--steps", str(steps), "--batch", str(B),
           "--context", str(T), "--layers", str(cfg["layers"]), "--heads", str(cfg["heads"]),
           "--width", str(cfg["width"]), "--eval-every", "0", "--eval-batches", "1",
           "--log-every", str(steps), "--out", f"/tmp/dd_compare_speed_{os.getpid()}", "--data", DATA]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    m = re.findall(r"\| (\d+) tok/s \|", out)
    if not m:
        raise RuntimeError("no tok/s in dd-node output:\n" + out)
    return float(m[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dd-node", default=os.path.join(ROOT, "build", "bin", "dd-node"))
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--torch-threads", default="1,2")
    ap.add_argument("--dd-threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=1,
                    help="rounds, alternating which side runs first; the ratio is their median")
    a = ap.parse_args()
    cfg = {"vocab": 256, "context": a.context, "layers": a.layers, "heads": a.heads, "width": a.width}
    tokens = a.steps * a.batch * a.context
    init = dd_gpt.init_params(cfg, 1337)  # once: its Python rng loop takes a while at 25M
    n_params = sum(p.numel() for p in init.values())
    print(f"model L={a.layers} C={a.width} heads={a.heads} ({n_params / 1e6:.2f}M params), "
          f"batch {a.batch}x{a.context}, {a.steps} steps = {tokens} tokens each run")
    ratios, bests_t, bests_d = [], [], []
    for r in range(a.rounds):
        # Alternate which side goes first, so a load change on the shared machine falls on both.
        sides = ["torch", "dd"] if r % 2 == 0 else ["dd", "torch"]
        best = {"torch": 0.0, "dd": 0.0}
        for side in sides:
            if side == "torch":
                for th in [int(x) for x in a.torch_threads.split(",")]:
                    tps = torch_tokens_per_second(cfg, a.batch, a.context, a.steps, th, init)
                    print(f"  round {r + 1}: PyTorch {torch.__version__} threads={th}: {tps:8.0f} tokens/s")
                    best["torch"] = max(best["torch"], tps)
            else:
                for th in [int(x) for x in a.dd_threads.split(",")]:
                    tps = dd_tokens_per_second(a.dd_node, a.batch, a.context, a.steps, th, cfg)
                    print(f"  round {r + 1}: dd-node train threads={th}: {tps:8.0f} tokens/s")
                    best["dd"] = max(best["dd"], tps)
        ratios.append(best["dd"] / best["torch"])
        bests_t.append(best["torch"])
        bests_d.append(best["dd"])
        print(f"  round {r + 1}: best PyTorch {best['torch']:.0f} | best ours {best['dd']:.0f} | "
              f"ratio {ratios[-1]:.2f}")
    print(f"median best PyTorch {statistics.median(bests_t):.0f} tokens/s | median best ours "
          f"{statistics.median(bests_d):.0f} tokens/s | median ratio ours/PyTorch "
          f"{statistics.median(ratios):.2f} (per round {', '.join(f'{x:.2f}' for x in ratios)}; "
          f"target >= 1.3)")

if __name__ == "__main__":
    main()
