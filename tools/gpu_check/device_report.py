#!/usr/bin/env python3
"""The Python half of tools/gpu_check/run_on_device.sh (docs/gpu.md).

Subcommands:
  compare-loss  a GPU `dd-node train` loss.csv against the committed CPU curve of the same seed:
                |delta| <= 1e-3 at each of the first 50 steps, <= 1 % relative at the last step
  speed         tokens/s, TFLOP/s and MFU of `dd-node train --backend cuda` at one shape, and of
                the PyTorch twin (tools/torch_reference/dd_gpt.py) at the same shape and precision
                (fp32, TF32 off: the CUDA backend's cuBLAS math mode) on the same GPU
  report        report.json and report.md from the sections' JSON files and sections.json
  memory        the batch the speed section picks for a shape and a memory size (checked here)

Only the standard library is needed, except `speed`'s PyTorch half (torch on the GPU machine;
without it the PyTorch columns say so and the ratio is absent).
"""
import argparse
import csv
import json
import math
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

SHAPES = {
    # the main job's model (examples/shakespeare.lua): byte-level GPT, 0.84M parameters
    "default": dict(layers=4, heads=4, width=128, context=128, vocab=256, batch=16),
    # GPT-2-small (124M); the batch comes from pick_batch
    "gpt2-small": dict(layers=12, heads=12, width=768, context=1024, vocab=50257, batch=None),
}

# Dense fp32 peaks without tensor cores (TF32 off), from NVIDIA's data sheets: the precision the
# CUDA backend uses. H100 SXM5 67 TFLOP/s, H100 PCIe 51, H200 67 (same GH100 die and clocks as
# H100 SXM).
FP32_PEAK_TFLOPS = [("H200", 67.0), ("H100 PCIe", 51.0), ("H100", 67.0), ("A100", 19.5)]


def fp32_peak(gpu_name):
    for key, peak in FP32_PEAK_TFLOPS:
        if key.lower() in gpu_name.lower():
            return peak
    return None


def num_params(s):
    """runtime/gpt.cpp: wte (tied head), wpe, per layer LN + qkv + proj + MLP, final LN."""
    V, T, C, L = s["vocab"], s["context"], s["width"], s["layers"]
    per_layer = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C
    return V * C + T * C + L * per_layer + 2 * C


def flops_per_token(s):
    """Training FLOPs per token: 6 per weight (forward 2, backward 4) over every matrix product,
    the tied LM head included, plus attention's two (T x T) products: 6 * 2 * L * T * C / 2 with
    the causal half counted in full as our kernels compute it (12 * L * T * C)."""
    V, T, C, L = s["vocab"], s["context"], s["width"], s["layers"]
    matmul_weights = L * 12 * C * C + V * C
    return 6 * matmul_weights + 12 * L * T * C


def activation_bytes(s, batch):
    """Peak training memory estimate (fp32): parameters, gradients and AdamW's two moments
    (16 bytes per parameter), per-layer activations kept for backward — about 34 * C floats per
    token for the products and norms plus the (H, T, T) attention probabilities and scores
    (2 * H * T per token) — and the logits with their gradient (2 * V per token)."""
    V, T, C, L, H = s["vocab"], s["context"], s["width"], s["layers"], s["heads"]
    tokens = batch * T
    per_token = L * (34 * C + 2 * H * T) + 2 * V
    return 16 * num_params(s) + 4 * tokens * per_token


def pick_batch(s, gpu_mem_mib, budget=0.6):
    for b in (32, 16, 8, 4, 2, 1):
        if activation_bytes(s, b) <= budget * gpu_mem_mib * 2**20:
            return b
    return 1


def cmd_memory(a):
    s = dict(SHAPES[a.shape])
    b = pick_batch(s, a.gpu_mem_mib)
    print(json.dumps({"shape": a.shape, "batch": b, "params": num_params(s),
                      "estimate_gib": activation_bytes(s, b) / 2**30}))


def read_losses(path):
    with open(path) as f:
        return {int(r["step"]): float(r["train_loss"]) for r in csv.DictReader(f)}


def cmd_compare_loss(a):
    ref = read_losses(a.fixture)
    run = read_losses(a.run)
    steps = min(a.steps, max(run))
    rows, ok = [], True
    for st in range(1, min(50, steps) + 1):
        d = abs(run[st] - ref[st])
        rows.append({"step": st, "cpu": ref[st], "cuda": run[st], "abs_diff": d, "pass": d <= 1e-3})
        ok &= d <= 1e-3
    last_rel = abs(run[steps] - ref[steps]) / abs(ref[steps])
    ok &= last_rel <= 0.01
    out = {"steps": steps, "max_abs_diff_first_50": max(r["abs_diff"] for r in rows),
           "last_step": steps, "last_cpu": ref[steps], "last_cuda": run[steps],
           "last_rel_diff": last_rel, "pass": ok, "rows": rows}
    json.dump(out, open(a.json, "w"), indent=1)
    print(f"loss agreement over {steps} steps: max |delta| first 50 = "
          f"{out['max_abs_diff_first_50']:.2e} (<= 1e-3), step {steps}: cpu {ref[steps]:.5f} "
          f"cuda {run[steps]:.5f} rel {last_rel:.2e} (<= 1e-2): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def dd_speed(a, s, batch, steps):
    os.makedirs(a.work, exist_ok=True)
    cmd = [a.dd_node, "train", "--backend", "cuda", "--data", a.data, "--steps", str(steps),
           "--batch", str(batch), "--context", str(s["context"]), "--layers", str(s["layers"]),
           "--heads", str(s["heads"]), "--width", str(s["width"]), "--vocab", str(s["vocab"]),
           "--eval-every", "0", "--eval-batches", "1", "--log-every", str(steps),
           "--out", os.path.join(a.work, "dd")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"dd-node train exit {r.returncode}: {r.stderr[-2000:]}")
    summary = json.load(open(os.path.join(a.work, "dd", "summary.json")))
    return summary["compute_tokens_per_second"]


def torch_speed(s, batch, steps, data_path):
    import torch  # the GPU machine's PyTorch
    sys.path.insert(0, os.path.join(ROOT, "tools", "torch_reference"))
    import dd_gpt
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 as our cuBLAS math mode
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    cfg = {k: s[k] for k in ("vocab", "context", "width", "layers", "heads")}
    torch.manual_seed(0)
    params = {}
    for name, shape in dd_gpt.tensor_layout(cfg):  # speed only: torch's RNG, GPT-2 scales
        t = torch.randn(shape, device=dev) * 0.02 if len(shape) == 2 else torch.zeros(shape, device=dev)
        params[name] = t.requires_grad_(True)
    opt = dd_gpt.make_optimizer(params, 1e-4, 0.1)
    raw = open(data_path, "rb").read()
    data = torch.tensor(list(raw[: 4 * 1024 * 1024]), dtype=torch.int64, device=dev)
    T = s["context"]
    g = torch.Generator(device=dev).manual_seed(0)
    speed = dd_gpt.tokens_per_second(params, cfg, opt, data, batch, T, steps, g,
                                     sync=torch.cuda.synchronize)
    return speed, torch.__version__


def cmd_speed(a):
    s = dict(SHAPES[a.shape])
    batch = s["batch"] or pick_batch(s, a.gpu_mem_mib)
    steps = 30 if a.shape == "default" else 12
    out = {"shape": a.shape, "model": s, "batch": batch, "params": num_params(s),
           "precision": "fp32 (TF32 off) in both", "gpu": a.gpu_name,
           "flops_per_token": flops_per_token(s)}
    try:
        out["dd_tokens_per_second"] = dd_speed(a, s, batch, steps)
    except RuntimeError as e:
        if a.shape == "default" or batch == 1:
            raise
        out["first_batch_failed"] = {"batch": batch, "error": str(e)[-500:]}
        batch //= 2  # the one halving fallback
        out["batch"] = batch
        out["dd_tokens_per_second"] = dd_speed(a, s, batch, steps)
    peak = fp32_peak(a.gpu_name)
    out["dd_tflops"] = out["dd_tokens_per_second"] * out["flops_per_token"] / 1e12
    out["fp32_peak_tflops"] = peak
    out["dd_mfu"] = out["dd_tflops"] / peak if peak else None
    try:
        tps, ver = torch_speed(s, batch, steps, a.data)
        out["torch_version"] = ver
        out["torch_tokens_per_second"] = tps
        out["torch_tflops"] = tps * out["flops_per_token"] / 1e12
        out["ratio_dd_over_torch"] = out["dd_tokens_per_second"] / tps
    except Exception as e:  # noqa: BLE001 — the report names why the twin did not run
        out["torch_error"] = f"{type(e).__name__}: {e}"[:500]
    json.dump(out, open(a.json, "w"), indent=1)
    print(json.dumps(out, indent=1))
    return 0


def cmd_report(a):
    out = {"gpu": a.gpu_name}
    status = json.load(open(os.path.join(a.out, "sections.json")))
    out["sections"] = status
    for name in ("loss", "speed_default", "speed_gpt2-small"):
        p = os.path.join(a.out, name + ".json")
        if os.path.exists(p):
            out[name] = json.load(open(p))
            out[name].pop("rows", None)
    ops = []
    p = os.path.join(a.out, "ops.log")
    if os.path.exists(p):
        for line in open(p):
            m = re.match(r"^(.*\S)\s+([-0-9.e+]+)\s+([-0-9.e+]+)\s+([-0-9.e+]+)\s+(PASS|FAIL)", line)
            if m:  # op and shape are printed in columns of 40 and 46 characters
                head = m.group(1)
                ops.append({"op": head[:40].strip(), "shape": head[41:].strip(),
                            "max_abs": float(m.group(2)), "max_rel": float(m.group(3)),
                            "tol": float(m.group(4)), "pass": m.group(5) == "PASS"})
    out["ops"] = ops
    p = os.path.join(a.out, "job-run", "summary.json")
    if os.path.exists(p):
        js = json.load(open(p))
        out["job"] = {k: js.get(k) for k in ("final_val_loss", "tokens", "wall_seconds", "goodput",
                                             "uptime", "merges", "mean_contributors_per_merge")}
    json.dump(out, open(os.path.join(a.out, "report.json"), "w"), indent=1)
    md = [f"# GPU check on {a.gpu_name}", "", "| section | exit | seconds |", "|---|---|---|"]
    md += [f"| {k} | {v['exit']} | {v['seconds']} |" for k, v in sorted(status.items())]
    if ops:
        bad = [o for o in ops if not o["pass"]]
        md += ["", f"ops: {len(ops)} checked, {len(bad)} failed"]
        md += [f"- FAIL {o['op']} {o['shape']}: rel {o['max_rel']:.2e} > tol {o['tol']:.1e}" for o in bad]
    if "loss" in out:
        l = out["loss"]
        md += ["", f"loss: max |delta| first 50 steps {l['max_abs_diff_first_50']:.2e}, step "
               f"{l['last_step']} rel {l['last_rel_diff']:.2e}: {'PASS' if l['pass'] else 'FAIL'}"]
    if "job" in out:
        md += ["", "job: " + ", ".join(f"{k} {v}" for k, v in out["job"].items())]
    md += ["", "| shape | batch | ours tok/s | ours TFLOP/s | MFU (fp32 peak) | PyTorch tok/s | ours / PyTorch |",
           "|---|---|---|---|---|---|---|"]
    for name in ("speed_default", "speed_gpt2-small"):
        if name in out:
            s = out[name]
            mfu = f"{s['dd_mfu']:.3f}" if s.get("dd_mfu") else "?"
            md.append(f"| {s['shape']} | {s['batch']} | {s['dd_tokens_per_second']:.0f} | "
                      f"{s['dd_tflops']:.2f} | {mfu} | {s.get('torch_tokens_per_second', float('nan')):.0f} | "
                      f"{s.get('ratio_dd_over_torch', float('nan')):.2f} |")
    open(os.path.join(a.out, "report.md"), "w").write("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("compare-loss")
    p.add_argument("--fixture", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--json", required=True)
    p = sub.add_parser("speed")
    p.add_argument("--shape", choices=sorted(SHAPES), required=True)
    p.add_argument("--dd-node", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--gpu-mem-mib", type=float, required=True)
    p.add_argument("--gpu-name", default="")
    p.add_argument("--json", required=True)
    p.add_argument("--work", required=True)
    p = sub.add_parser("report")
    p.add_argument("--out", required=True)
    p.add_argument("--gpu-name", default="")
    p = sub.add_parser("memory")
    p.add_argument("--shape", choices=sorted(SHAPES), required=True)
    p.add_argument("--gpu-mem-mib", type=float, required=True)
    a = ap.parse_args()
    return {"compare-loss": cmd_compare_loss, "speed": cmd_speed, "report": cmd_report,
            "memory": cmd_memory}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
