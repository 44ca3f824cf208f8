#!/usr/bin/env python3
"""Checks a run's model.safetensors with tools independent of the C++ code.

tests/apps/model_file_test.sh runs it (ctest model_file_test) in a venv holding PyPI's
`safetensors` and `numpy`; run it by hand the same way after any run:

    python tests/apps/model_file_check.py RUN_DIR [--data FILE] [--tol 1e-4] [--torch]

It loads RUN_DIR/model.safetensors with the `safetensors` package and checks:
  * metadata: format dd-gpt-1, model_kind gpt, config, eval (the windows), val_loss, digest;
  * names and shapes: exactly the GPT layout of runtime/gpt.hpp (gpt_tensors) for that config,
    all float32 and finite;
  * values: the FNV-1a 64 digest of the tensors' bytes in layout order equals the digest the
    run's evaluator computed (metadata digest, run_info.json digest);
  * the windows: the rule of runtime/eval.hpp gives exactly the metadata's window_starts, and
    summary.json's final_eval states the same data file, split and batch shape;
  * the loss: a NumPy forward pass of the GPT (float64) on those windows equals the run's final
    validation loss (summary.json final_val_loss and metadata val_loss) within --tol;
  * with --torch (when PyTorch is installed): the same with an independent PyTorch model
    (torch.nn.functional ops, safetensors.torch.load_file).
Prints every figure it compares; exits 1 with "FAIL: ..." on the first mismatch.
"""
import argparse
import json
import os
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tools/hf"))
import numpy_gpt  # noqa: E402


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def gpt_layout(cfg):
    """(name, shape) in the order of runtime/gpt.cpp gpt_tensors()."""
    V, T, C, L = cfg["vocab"], cfg["context"], cfg["width"], cfg["layers"]
    out = [("wte", (V, C)), ("wpe", (T, C))]
    for i in range(L):
        h = f"h.{i}."
        out += [
            (h + "ln_1.weight", (C,)), (h + "ln_1.bias", (C,)),
            (h + "attn.qkv.weight", (3 * C, C)), (h + "attn.qkv.bias", (3 * C,)),
            (h + "attn.proj.weight", (C, C)), (h + "attn.proj.bias", (C,)),
            (h + "ln_2.weight", (C,)), (h + "ln_2.bias", (C,)),
            (h + "mlp.fc.weight", (4 * C, C)), (h + "mlp.fc.bias", (4 * C,)),
            (h + "mlp.proj.weight", (C, 4 * C)), (h + "mlp.proj.bias", (C,)),
        ]
    out += [("ln_f.weight", (C,)), ("ln_f.bias", (C,))]
    return out


def fnv1a64(data):
    h = 1469598103934665603
    for byte in data:
        h ^= byte
        h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def window_starts(n_val, T, windows):
    W = (n_val - 1) // T
    return [(w % W) * T for w in range(windows)]


def torch_loss_fn(path, cfg):
    """An independent PyTorch model on the file's tensors; None when torch is absent."""
    try:
        import torch
        import torch.nn.functional as F
        from safetensors.torch import load_file as torch_load
    except ImportError:
        return None
    P = {k: v.double() for k, v in torch_load(path).items()}
    C, NH, L = cfg["width"], cfg["heads"], cfg["layers"]

    def loss(idx, tgt):
        idx, tgt = torch.from_numpy(idx).long(), torch.from_numpy(tgt).long()
        B, T = idx.shape
        x = P["wte"][idx] + P["wpe"][:T]
        for i in range(L):
            g = lambda n: P[f"h.{i}.{n}"]  # noqa: E731
            h = F.layer_norm(x, (C,), g("ln_1.weight"), g("ln_1.bias"), 1e-5)
            q, k, v = F.linear(h, g("attn.qkv.weight"), g("attn.qkv.bias")).split(C, dim=-1)
            q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            y = y.transpose(1, 2).reshape(B, T, C)
            x = x + F.linear(y, g("attn.proj.weight"), g("attn.proj.bias"))
            h = F.layer_norm(x, (C,), g("ln_2.weight"), g("ln_2.bias"), 1e-5)
            h = F.gelu(F.linear(h, g("mlp.fc.weight"), g("mlp.fc.bias")), approximate="tanh")
            x = x + F.linear(h, g("mlp.proj.weight"), g("mlp.proj.bias"))
        x = F.layer_norm(x, (C,), P["ln_f.weight"], P["ln_f.bias"], 1e-5)
        logits = x @ P["wte"].T
        return float(F.cross_entropy(logits.reshape(B * T, -1), tgt.reshape(-1)))

    return loss


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--data", help="the text file (default: the one the run names)")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--torch", action="store_true", help="also check with PyTorch")
    a = ap.parse_args()

    path = os.path.join(a.run_dir, "model.safetensors")
    if not os.path.isfile(path):
        fail(f"{path} is missing")
    with safe_open(path, framework="np") as f:
        md = f.metadata() or {}
    for key in ("format", "model_kind", "config", "eval", "val_loss", "digest"):
        if key not in md:
            fail(f"{path}: metadata '{key}' is missing (has {sorted(md)})")
    if md["format"] != "dd-gpt-1" or md["model_kind"] != "gpt":
        fail(f"format {md['format']!r} / model_kind {md['model_kind']!r}")
    cfg = json.loads(md["config"])
    spec = json.loads(md["eval"])
    print(f"model {path}: config {cfg}")

    # Names, shapes, dtype.
    tensors = load_file(path)
    layout = gpt_layout(cfg)
    if sorted(tensors) != sorted(n for n, _ in layout):
        fail(f"tensor names {sorted(tensors)} != GPT layout {sorted(n for n, _ in layout)}")
    for name, shape in layout:
        t = tensors[name]
        if t.shape != shape or t.dtype != np.float32:
            fail(f"tensor {name}: {t.dtype}{t.shape}, expected float32{shape}")
        if not np.all(np.isfinite(t)):
            fail(f"tensor {name} holds non-finite values")
    n_params = sum(int(np.prod(s)) for _, s in layout)
    print(f"{len(layout)} tensors, {n_params} parameters, names and shapes as runtime/gpt.hpp")

    # Values: the digest of the flat parameter vector, bit for bit.
    flat = b"".join(tensors[n].astype("<f4").tobytes() for n, _ in layout)
    digest = f"{fnv1a64(flat):016x}"
    print(f"digest {digest} (metadata {md['digest']})")
    if digest != md["digest"]:
        fail(f"digest of the tensors {digest} != metadata digest {md['digest']}")
    info_path = os.path.join(a.run_dir, "run_info.json")
    if os.path.isfile(info_path):
        with open(info_path) as f:
            info = json.load(f)
        if "digest" in info and info["digest"] != digest:
            fail(f"run_info.json digest {info['digest']} != the file's {digest}")

    # The windows.
    with open(os.path.join(a.run_dir, "summary.json")) as f:
        summary = json.load(f)
    fe = summary.get("final_eval")
    if fe is None:
        fail("summary.json has no final_eval")
    for key in ("data_file", "train_fraction", "validation_offset", "validation_tokens", "batch",
                "seq_len", "windows"):
        if fe.get(key) != spec.get(key):
            fail(f"summary.json final_eval.{key} = {fe.get(key)!r} but the model's eval says "
                 f"{spec.get(key)!r}")
    if summary.get("model_file") != "model.safetensors":
        fail(f"summary.json model_file = {summary.get('model_file')!r}")
    B, T, nw = spec["batch"], spec["seq_len"], spec["windows"]
    starts = window_starts(spec["validation_tokens"], T, nw)
    if starts != spec["window_starts"]:
        fail("the window rule does not give the metadata's window_starts")
    data_file = a.data or spec["data_file"]
    with open(data_file, "rb") as f:
        raw = f.read()
    n_train = int(len(raw) * spec["train_fraction"])
    val = np.frombuffer(raw[n_train:], dtype=np.uint8).astype(np.int64)
    if n_train != spec["validation_offset"] or len(val) != spec["validation_tokens"]:
        fail(f"{data_file}: split at {n_train} with {len(val)} validation tokens, the run had "
             f"{spec['validation_offset']} and {spec['validation_tokens']}")
    print(f"windows: {len(starts)} of {T} tokens (in forward passes of {B}) of the validation split "
          f"of {data_file} (tokens [{n_train}, {len(raw)}))")

    # The loss.
    P = {k: v.astype(np.float64) for k, v in tensors.items()}
    tl = torch_loss_fn(path, cfg) if a.torch else None
    if a.torch and tl is None:
        print("note: --torch given but PyTorch is not installed; NumPy only")
    # Every window has equal weight: each batch's mean loss weighted by its rows.
    losses, tlosses = [], []
    for first in range(0, nw, B):
        s = starts[first:first + B]
        idx = np.stack([val[x:x + T] for x in s])
        tgt = np.stack([val[x + 1:x + T + 1] for x in s])
        lg = numpy_gpt.logits(P, idx, cfg["layers"], cfg["width"], cfg["heads"])
        losses.append(numpy_gpt.cross_entropy(lg, tgt) * len(s))
        if tl is not None:
            tlosses.append(tl(idx, tgt) * len(s))
    mine = sum(losses) / nw
    run_loss = summary.get("final_val_loss")
    md_loss = float(md["val_loss"])
    print(f"numpy loss {mine:.8f}; run final_val_loss {run_loss}; metadata val_loss {md_loss:.8f}; "
          f"|numpy - run| = {abs(mine - run_loss):.3e} (tolerance {a.tol})")
    if run_loss is None or abs(mine - run_loss) > a.tol or abs(mine - md_loss) > a.tol:
        fail(f"numpy loss {mine} vs the run's {run_loss} / {md_loss}")
    if tlosses:
        tmine = sum(tlosses) / nw
        print(f"torch loss {tmine:.8f}; |torch - run| = {abs(tmine - run_loss):.3e}")
        if abs(tmine - run_loss) > a.tol:
            fail(f"torch loss {tmine} vs the run's {run_loss}")
    print("OK")


if __name__ == "__main__":
    main()
