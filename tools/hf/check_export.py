#!/usr/bin/env python3
"""Checks a `dd-node export --format hf` directory with tools independent of our C++ code.

    python tools/hf/check_export.py OUT_DIR RUN_DIR [--tol 1e-5]

Needs PyPI's numpy, safetensors and tokenizers (no torch). It checks:
  * config.json: model_type gpt2, GPT2LMHeadModel, gelu_new, n_inner null (4·n_embd),
    layer_norm_epsilon 1e-5, tied embeddings, the sizes of RUN_DIR's model;
  * model.safetensors: metadata format "pt", exactly transformers' GPT-2 names and shapes
    (Conv1D weights stored (in, out)), float32;
  * the loss: a NumPy float64 GPT-2 forward written against transformers' names and Conv1D
    layout (y = x @ W + b), on the evaluation windows RUN_DIR's model file records, equals the
    run's final_val_loss (summary.json) within --tol;
  * tokenizer.json with the `tokenizers` library: a paragraph of the validation text encodes
    to the ids our tokenizer gives (byte level: the bytes; subword: --ids FILE, one id per
    line, of --text FILE) and decodes back to the same text.
Prints every figure it compares; exits 1 with "FAIL: ..." on the first mismatch.
"""
import argparse
import json
import os
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_gpt  # noqa: E402


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def hf_layout(V, T, C, L):
    out = [("transformer.wte.weight", (V, C)), ("transformer.wpe.weight", (T, C))]
    for i in range(L):
        h = f"transformer.h.{i}."
        out += [(h + "ln_1.weight", (C,)), (h + "ln_1.bias", (C,)),
                (h + "attn.c_attn.weight", (C, 3 * C)), (h + "attn.c_attn.bias", (3 * C,)),
                (h + "attn.c_proj.weight", (C, C)), (h + "attn.c_proj.bias", (C,)),
                (h + "ln_2.weight", (C,)), (h + "ln_2.bias", (C,)),
                (h + "mlp.c_fc.weight", (C, 4 * C)), (h + "mlp.c_fc.bias", (4 * C,)),
                (h + "mlp.c_proj.weight", (4 * C, C)), (h + "mlp.c_proj.bias", (C,))]
    out += [("transformer.ln_f.weight", (C,)), ("transformer.ln_f.bias", (C,))]
    return out


def read_tokens(path, fmt):
    raw = open(path, "rb").read()
    if fmt == "llmc":
        header = np.frombuffer(raw[:1024], dtype="<i4")
        if header[0] != 20240520:
            fail(f"{path}: magic {header[0]}")
        dt = "<u2" if header[1] == 1 else "<u4"
        return np.frombuffer(raw[1024:], dtype=dt)[: header[2]].astype(np.int64)
    return np.frombuffer(raw, dtype="<u2" if fmt == "uint16" else "<u4").astype(np.int64)


def validation_split(spec):
    """The validation tokens the run scored, from the files its eval spec names."""
    if spec.get("data_kind") == "tokens":
        if spec["validation_files"]:
            return np.concatenate([read_tokens(f, spec["format"]) for f in spec["validation_files"]])
        allt = np.concatenate([read_tokens(f, spec["format"]) for f in spec["files"]])
        return allt[int(len(allt) * spec["train_fraction"]):]
    data = open(spec["data_file"], "rb").read()
    return np.frombuffer(data, dtype=np.uint8).astype(np.int64)[spec["validation_offset"]:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("run_dir")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--text", help="subword: a text file whose ids are in --ids")
    ap.add_argument("--ids", help="subword: our ids of --text, one per line")
    a = ap.parse_args()

    cfg = json.load(open(os.path.join(a.out_dir, "config.json")))
    with safe_open(os.path.join(a.run_dir, "model.safetensors"), framework="np") as f:
        md = f.metadata()
    ours = json.loads(md["config"])
    spec = json.loads(md["eval"])
    want = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
            "activation_function": "gelu_new", "n_inner": None, "layer_norm_epsilon": 1e-5,
            "tie_word_embeddings": True, "vocab_size": ours["vocab"],
            "n_positions": ours["context"], "n_embd": ours["width"], "n_layer": ours["layers"],
            "n_head": ours["heads"], "scale_attn_weights": True,
            "scale_attn_by_inverse_layer_idx": False}
    for k, v in want.items():
        if cfg.get(k) != v:
            fail(f"config.json {k} = {cfg.get(k)!r}, expected {v!r}")
    print(f"config.json: {json.dumps({k: cfg[k] for k in want})}")

    path = os.path.join(a.out_dir, "model.safetensors")
    with safe_open(path, framework="np") as f:
        if (f.metadata() or {}).get("format") != "pt":
            fail(f"{path}: metadata format {(f.metadata() or {}).get('format')!r}, expected 'pt'")
    P = load_file(path)
    layout = hf_layout(ours["vocab"], ours["context"], ours["width"], ours["layers"])
    if sorted(P) != sorted(n for n, _ in layout):
        fail(f"names {sorted(P)} != transformers GPT-2 {sorted(n for n, _ in layout)}")
    for n, s in layout:
        if P[n].shape != s or P[n].dtype != np.float32:
            fail(f"{n}: {P[n].dtype}{P[n].shape}, expected float32{s}")
    print(f"model.safetensors: {len(layout)} tensors with transformers' GPT-2 names and shapes")
    P = {k: v.astype(np.float64) for k, v in P.items()}

    val = validation_split(spec)
    B, T = spec["batch"], spec["seq_len"]
    windows = spec["windows"] if "windows" in spec else spec["batches"] * B
    losses = []  # each batch's mean weighted by its rows: every window weighs the same
    for idx, tgt in numpy_gpt.eval_batches(val, B, T, windows):
        lg = numpy_gpt.logits(P, idx, cfg["n_layer"], cfg["n_embd"], cfg["n_head"],
                              numpy_gpt.HF, cfg["layer_norm_epsilon"])
        losses.append(numpy_gpt.cross_entropy(lg, tgt) * len(idx))
    loss = float(sum(losses) / windows)
    summary = json.load(open(os.path.join(a.run_dir, "summary.json")))
    ref = summary["final_val_loss"]
    print(f"NumPy forward over transformers' layout: loss {loss:.8f}, the run's {ref:.8f}, "
          f"difference {abs(loss - ref):.2e} (tol {a.tol})")
    if abs(loss - ref) > a.tol:
        fail("the exported weights do not give the run's loss")

    tok = Tokenizer.from_file(os.path.join(a.out_dir, "tokenizer.json"))
    if a.text:
        text = open(a.text, encoding="utf-8").read()
        ids = [int(x) for x in open(a.ids).read().split()]
    else:
        text = bytes(val[:400].astype(np.uint8)).decode("utf-8", errors="replace")
        ids = list(text.encode("utf-8"))
    got = tok.encode(text).ids
    if got != ids:
        first = next((i for i, (x, y) in enumerate(zip(got, ids)) if x != y), min(len(got), len(ids)))
        fail(f"tokenizers encodes to {len(got)} ids, ours {len(ids)}; first difference at {first}: "
             f"{got[first:first + 8]} vs {ids[first:first + 8]}")
    if tok.decode(got) != text:
        fail("tokenizers' decode does not give the text back")
    print(f"tokenizer.json: {len(text)} characters encode to the same {len(ids)} ids as ours "
          "and decode back")
    print("PASS")


if __name__ == "__main__":
    main()
