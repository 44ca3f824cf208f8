#!/usr/bin/env python3
"""Writes tests/fixtures/moe_golden.json: a tiny mixture-of-experts GPT (runtime/moe_gpt.hpp)
trained for 4 AdamW steps in PyTorch from OUR init, for tests/runtime/moe_test.cpp.

This is an independent implementation: autograd differentiates the loss (the C++ model has a
hand-written backward), top-k uses torch.topk on the logits with ties broken to the lower index
(explicit check below), capacity is assigned by a plain Python loop in batch order, and the
auxiliary loss E * sum_e f_e * P_e is built from tensors (f detached). Two cases: k = 1 with a
capacity factor that drops tokens, and k = 2 (renormalised gates).

Regenerate (dev machines only; needs PyTorch, e.g. `pip install torch` from PyPI in a venv):
    python tools/torch_reference/make_moe_golden.py     # from the repo root
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dd_gpt  # noqa: E402  (the init, the attention half, the lr schedule)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def moe_layout(cfg):
    """[(name, shape)] in runtime/moe_gpt.cpp moe_gpt_tensors() order."""
    V, T, C, L, E = cfg["vocab"], cfg["context"], cfg["width"], cfg["layers"], cfg["experts"]
    out = [("wte", (V, C)), ("wpe", (T, C))]
    for l in range(L):
        h = f"h.{l}."
        out += dd_gpt.attention_tensors(h, C) + [(h + "mlp.router.weight", (E, C))]
        for e in range(E):
            out += dd_gpt.mlp_tensors(f"{h}mlp.experts.{e}.", C)
    out += [("ln_f.weight", (C,)), ("ln_f.bias", (C,))]
    return out


def init_params(cfg, seed):
    """moe_gpt::init(seed): one rng stream in layout order; N(0,0.02) for 2-D weights,
    0.02/sqrt(2L) for attn.proj.weight and every expert's proj.weight; LN weights 1."""
    return dd_gpt.init_from_layout(
        moe_layout(cfg), seed, cfg["layers"],
        lambda name: name.endswith("attn.proj.weight") or (".experts." in name and name.endswith(".proj.weight")))


def route(logits, k):
    """Top-k of each row of logits (N,E), descending, ties to the lower index."""
    vals, idx = torch.topk(logits, k, dim=1, sorted=True)
    # torch.topk does not promise a tie order: enforce "lower index first" explicitly.
    rows = []
    for n in range(logits.shape[0]):
        row = logits[n].tolist()
        order = sorted(range(len(row)), key=lambda e: (-row[e], e))[:k]
        rows.append(order)
    return torch.tensor(rows, dtype=torch.int64)


def moe_layer(y, params, h, cfg, stats):
    """y (N,C) -> (N,C) output of the MoE half and the aux term of this layer."""
    N, C = y.shape
    E, k, cf = cfg["experts"], cfg["top_k"], cfg["capacity_factor"]
    logits = y @ params[h + "mlp.router.weight"].T
    probs = logits.softmax(dim=1)
    idx = route(logits.detach(), k)
    chosen = probs.gather(1, idx)
    gates = chosen if k == 1 else chosen / chosen.sum(dim=1, keepdim=True)
    cap = max(1, math.ceil(cf * k * N / E))
    used = [0] * E
    routed = [0] * E
    keep = []  # (n, j, e)
    for n in range(N):
        for j in range(k):
            e = int(idx[n, j])
            routed[e] += 1
            if used[e] < cap:
                used[e] += 1
                keep.append((n, j, e))
    out = torch.zeros_like(y)
    for e in range(E):
        mine = [(n, j) for (n, j, ee) in keep if ee == e]
        if not mine:
            continue
        ns = torch.tensor([n for n, _ in mine])
        js = torch.tensor([j for _, j in mine])
        x = f"{h}mlp.experts.{e}."
        z = F.gelu(y[ns] @ params[x + "fc.weight"].T + params[x + "fc.bias"], approximate="tanh")
        z = z @ params[x + "proj.weight"].T + params[x + "proj.bias"]
        out = out.index_add(0, ns, gates[ns, js].unsqueeze(1) * z)
    f = torch.tensor([routed[e] / (k * N) for e in range(E)])
    P = probs.mean(dim=0)
    aux = E * (f * P).sum()
    stats.append({"routed": routed, "dropped": N * k - len(keep)})
    return out, aux


def forward(params, cfg, idx, targets):
    """(cross-entropy, sum of aux over layers, per-layer stats)."""
    auxes, stats = [], []

    def second_half(x, y, h):
        B, T, C = y.shape
        out, aux = moe_layer(y.reshape(B * T, C), params, h, cfg, stats)
        auxes.append(aux)
        return x + out.view(B, T, C)

    ce = dd_gpt.decoder_loss(params, cfg, idx, targets, second_half)
    aux_total = torch.zeros(())
    for aux in auxes:
        aux_total = aux_total + aux
    return ce, aux_total, stats


def run_case(cfg, seed, B, T, steps, hp, text):
    batches = dd_gpt.text_batches(text, B, T, steps)
    params = init_params(cfg, seed)
    flat0 = torch.cat([p.reshape(-1).double() for p in params.values()])
    for p in params.values():
        p.requires_grad_(True)
    opt = dd_gpt.make_optimizer(params, hp["lr"], hp["weight_decay"])
    out = []
    for s in range(steps):
        dd_gpt.set_step_lr(opt, s, hp)
        opt.zero_grad()
        idx, tgt = dd_gpt.batch_tensors(batches[s])
        ce, aux, stats = forward(params, cfg, idx, tgt)
        loss = ce + cfg["aux_loss"] * aux
        loss.backward()
        # An expert that received no token has no autograd gradient (None), which torch's AdamW
        # would skip entirely; the C++ model's flat gradient holds zeros there and AdamW still
        # steps it (moments, weight decay). Use zeros so both run the same optimizer.
        for p in params.values():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        gn = torch.nn.utils.clip_grad_norm_(list(params.values()), hp["grad_clip"])
        opt.step()
        flat = torch.cat([p.detach().reshape(-1).double() for p in params.values()])
        out.append({"loss": loss.item(), "ce": ce.item(), "aux": aux.item(),
                    "grad_norm": gn.item(), "stats": stats,
                    "sum_abs": flat.abs().sum().item(), "sum_sq": (flat * flat).sum().item()})
    return {"config": cfg, "seed": seed, "B": B, "T": T, "hyper": hp, "batches": batches,
            "init": {"sum": flat0.sum().item(), "sum_sq": (flat0 * flat0).sum().item(),
                     "first": [float(x) for x in flat0[:8]]},
            "steps": out}


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    text = open(os.path.join(ROOT, "datasets", "tinyshakespeare", "input.txt"), "rb").read()
    hp = {"lr": 1e-2, "warmup": 2, "total": 4, "min_lr_ratio": 0.1, "weight_decay": 0.1, "grad_clip": 1.0}
    base = {"kind": "moe_gpt", "vocab": 256, "context": 16, "layers": 2, "heads": 2, "width": 16}
    cases = [
        dict(base, experts=4, top_k=1, capacity_factor=1.0, aux_loss=0.01),
        dict(base, experts=3, top_k=2, capacity_factor=1.25, aux_loss=0.05),
    ]
    result = {"generator": "tools/torch_reference/make_moe_golden.py", "torch": torch.__version__,
              "cases": [run_case(c, 7 + i, 4, 16, 4, hp, text) for i, c in enumerate(cases)]}
    path = os.path.join(ROOT, "tests", "fixtures", "moe_golden.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    for c in result["cases"]:
        print(c["config"]["top_k"], [round(s["loss"], 6) for s in c["steps"]],
              [s["stats"][0]["dropped"] for s in c["steps"]])
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
