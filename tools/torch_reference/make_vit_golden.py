#!/usr/bin/python3
"""Writes tests/fixtures/vit_golden.json: a tiny ViT (both poolings) on the first MNIST t10k
images, trained for 3 AdamW steps in PyTorch from OUR init (dd_vit.py), for
tests/runtime/vit_golden_test.cpp.

Regenerate (dev machines only; needs torch, e.g. a venv with PyPI torch):
    python3 tools/torch_reference/make_vit_golden.py      # from the repo root
The C++ test reads the config, seed, hyperparameters and batches from the file.
"""
import gzip
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dd_vit  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def mnist(n):
    d = os.path.join(ROOT, "datasets", "mnist-t10k")
    img = gzip.open(os.path.join(d, "t10k-images-idx3-ubyte.gz")).read()[16:16 + n * 784]
    lab = gzip.open(os.path.join(d, "t10k-labels-idx1-ubyte.gz")).read()[8:8 + n]
    return [list(img[i * 784:(i + 1) * 784]) for i in range(n)], list(lab)


def checksums(params):
    flat = torch.cat([p.detach().reshape(-1).double() for p in params.values()])
    return {"sum": flat.sum().item(), "sum_sq": (flat * flat).sum().item(),
            "sum_abs": flat.abs().sum().item(), "first": [float(x) for x in flat[:8]]}


def run(cfg, seed, batches, hp):
    params = dd_vit.init_params(cfg, seed)
    init = checksums(params)
    for p in params.values():
        p.requires_grad_(True)
    opt = dd_vit.make_optimizer(params, cfg, hp["lr"], hp["weight_decay"])
    losses, logits0, grads0, after = [], None, None, []
    for s, b in enumerate(batches):
        opt.zero_grad()
        px = torch.tensor(b["pixels"], dtype=torch.int64).view(-1, cfg["rows"], cfg["cols"])
        lab = torch.tensor(b["labels"], dtype=torch.int64)
        loss, logits = dd_vit.forward(params, cfg, px, lab)
        loss.backward()
        if s == 0:
            logits0 = [[float(x) for x in row] for row in logits.detach()]
            grads0 = {n: {"sum": p.grad.double().sum().item(),
                          "sum_abs": p.grad.double().abs().sum().item()}
                      for n, p in params.items()}
        opt.step()
        losses.append(loss.item())
        after.append(checksums(params))
    return {"init": init, "losses": losses, "logits0": logits0, "grads0": grads0,
            "after_step": after}


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    B, steps, seed = 4, 3, 7
    hp = {"lr": 1e-2, "weight_decay": 0.1}
    imgs, labs = mnist(B * steps)
    batches = [{"pixels": [v for i in range(s * B, s * B + B) for v in imgs[i]],
                "labels": labs[s * B:s * B + B]} for s in range(steps)]
    out = {"generator": "tools/torch_reference/make_vit_golden.py", "torch": torch.__version__,
           "seed": seed, "B": B, "hyper": hp, "batches": batches, "runs": []}
    for pooling in ("cls", "mean"):
        cfg = {"rows": 28, "cols": 28, "patch": 7, "classes": 10, "layers": 2, "heads": 2,
               "width": 16, "pooling": pooling}
        r = run(cfg, seed, batches, hp)
        r["config"] = cfg
        out["runs"].append(r)
        print(pooling, "losses", r["losses"])
    path = os.path.join(ROOT, "tests", "fixtures", "vit_golden.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
