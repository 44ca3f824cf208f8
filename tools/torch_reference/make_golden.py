#!/usr/bin/python3
"""Writes tests/fixtures/gpt_golden.json: a tiny GPT trained for 5 AdamW steps in PyTorch from
OUR init (dd::rng re-implemented in dd_gpt.py), for tests/runtime/gpt_golden_test.cpp.

Regenerate (dev machines only; needs python3-torch):
    /usr/bin/python3 tools/torch_reference/make_golden.py   # from the repo root (Debian python3-torch)
The C++ test reads the config, seed, hyperparameters and token batches from the file, so changing
them here is enough.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dd_gpt  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def checksums(params):
    flat = torch.cat([p.detach().reshape(-1).double() for p in params.values()])
    return {"sum": flat.sum().item(), "sum_sq": (flat * flat).sum().item(),
            "sum_abs": flat.abs().sum().item(), "first": [float(x) for x in flat[:8]],
            "wte_sum": params["wte"].detach().double().sum().item()}


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    cfg = {"vocab": 256, "context": 16, "layers": 2, "heads": 2, "width": 32}
    seed, B, T, steps = 42, 4, 16, 5
    hp = {"lr": 1e-2, "warmup": 2, "total": 5, "min_lr_ratio": 0.1, "weight_decay": 0.1, "grad_clip": 1.0}
    text = open(os.path.join(ROOT, "datasets", "tinyshakespeare", "input.txt"), "rb").read()
    batches = dd_gpt.text_batches(text, B, T, steps)  # consecutive windows from the start

    params = dd_gpt.init_params(cfg, seed)
    init_sums = checksums(params)
    for p in params.values():
        p.requires_grad_(True)
    opt = dd_gpt.make_optimizer(params, hp["lr"], hp["weight_decay"])
    losses, grad_norms, after = [], [], []
    for s in range(steps):
        dd_gpt.set_step_lr(opt, s, hp)
        opt.zero_grad()
        idx, tgt = dd_gpt.batch_tensors(batches[s])
        loss = dd_gpt.forward(params, cfg, idx, tgt)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(list(params.values()), hp["grad_clip"])
        opt.step()
        losses.append(loss.item())
        grad_norms.append(gn.item())
        after.append(checksums(params))
    out = {"generator": "tools/torch_reference/make_golden.py", "torch": torch.__version__,
           "config": cfg, "seed": seed, "B": B, "T": T, "hyper": hp, "batches": batches,
           "init": init_sums, "losses": losses, "grad_norms": grad_norms, "after_step": after}
    path = os.path.join(ROOT, "tests", "fixtures", "gpt_golden.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {path}: losses {losses}")


if __name__ == "__main__":
    main()
