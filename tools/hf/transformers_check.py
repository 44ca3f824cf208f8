#!/usr/bin/env python3
"""The full check of an export with Hugging Face transformers (by hand; needs torch).

    python tools/hf/transformers_check.py OUT_DIR RUN_DIR --dd-node build/bin/dd-node

OUT_DIR is `dd-node export RUN_DIR --format hf OUT_DIR`. Loads it with
AutoModelForCausalLM.from_pretrained and AutoTokenizer.from_pretrained (no custom code) and
checks, printing every figure:
  * logits on the run's evaluation windows (the first batch) against a float64 NumPy forward
    over RUN_DIR/model.safetensors in our own names and layouts: max |Δ| / max |ours| <= 1e-4;
  * the loss over all the run's evaluation windows against summary.json final_val_loss (our
    C++ evaluator): |Δ| <= 1e-5;
  * greedy generation of 50 tokens after a prompt (fewer when the model's context is shorter than
    prompt + 50: context - prompt, said so) equals `dd-node sample RUN_DIR --prompt P
    --tokens N --temperature 0`;
  * the tokenizer encodes a paragraph of the validation text to our ids (byte level: the bytes;
    subword: the run's validation shard).
Exits 1 with "FAIL: ..." on the first mismatch.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch
from safetensors import safe_open
from safetensors.numpy import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_gpt  # noqa: E402
from check_export import validation_split  # noqa: E402


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("run_dir")
    ap.add_argument("--dd-node", required=True)
    ap.add_argument("--prompt", default="ROMEO:")
    a = ap.parse_args()
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")

    model = AutoModelForCausalLM.from_pretrained(a.out_dir, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(a.out_dir)
    print(f"loaded {type(model).__name__} ({sum(p.numel() for p in model.parameters())} "
          f"parameters) and {type(tok).__name__} (vocab {len(tok)})")

    path = os.path.join(a.run_dir, "model.safetensors")
    with safe_open(path, framework="np") as f:
        md = f.metadata()
    cfg = json.loads(md["config"])
    spec = json.loads(md["eval"])
    P = {k: v.astype(np.float64) for k, v in load_file(path).items()}
    val = validation_split(spec)
    B, T = spec["batch"], spec["seq_len"]
    windows = spec["windows"] if "windows" in spec else spec["batches"] * B
    losses = []  # each batch's mean loss weighted by its rows: every window weighs the same
    for b, (idx, tgt) in enumerate(numpy_gpt.eval_batches(val, B, T, windows)):
        with torch.no_grad():
            out = model(torch.from_numpy(idx)).logits
        if b == 0:
            ref = numpy_gpt.logits(P, idx, cfg["layers"], cfg["width"], cfg["heads"])
            rel = float(np.abs(out.double().numpy() - ref).max() / np.abs(ref).max())
            print(f"logits (batch 0, {len(idx)}x{T}x{cfg['vocab']}): max |transformers - ours| / "
                  f"max |ours| = {rel:.2e} (limit 1e-4)")
            if rel > 1e-4:
                fail("logits differ")
        losses.append(len(idx) * float(torch.nn.functional.cross_entropy(
            out.reshape(-1, out.shape[-1]), torch.from_numpy(tgt).reshape(-1))))
    loss = sum(losses) / windows
    run_loss = json.load(open(os.path.join(a.run_dir, "summary.json")))["final_val_loss"]
    print(f"loss on the run's {windows} windows: transformers {loss:.8f}, our evaluator "
          f"{run_loss:.8f}, |Δ| {abs(loss - run_loss):.2e} (limit 1e-5)")
    if abs(loss - run_loss) > 1e-5:
        fail("loss differs")

    ids = tok(a.prompt, return_tensors="pt").input_ids
    # The model's context (n_positions): prompt + generated tokens must fit in it (a GPT-2 past
    # its position table fails), so a short-context model generates fewer than 50 tokens.
    context = getattr(model.config, "n_positions", None) or model.config.max_position_embeddings
    n = min(50, context - ids.shape[1])
    if n < 1:
        fail(f"the prompt {a.prompt!r} is {ids.shape[1]} tokens, the model's context "
             f"{context}: nothing left to generate (give a shorter --prompt)")
    if n < 50:
        print(f"the model's context is {context} tokens and the prompt {ids.shape[1]}: greedy "
              f"generation of {n} tokens instead of 50 (context - prompt)")
    with torch.no_grad():
        gen = model.generate(ids, max_new_tokens=n, do_sample=False, pad_token_id=0)
    hf_text = tok.decode(gen[0], skip_special_tokens=False)
    ours = subprocess.run([a.dd_node, "sample", a.run_dir, "--prompt", a.prompt, "--tokens", str(n),
                           "--temperature", "0"], capture_output=True, text=True, check=True).stdout
    ours = ours[:-1] if ours.endswith("\n") else ours
    print(f"greedy {n} tokens, transformers: {hf_text!r}")
    print(f"greedy {n} tokens, dd-node sample: {ours!r}")
    if hf_text != ours:
        fail("greedy generations differ")

    if spec.get("tokenizer", "byte") == "byte":
        para = bytes(val[:600].astype(np.uint8)).decode("utf-8", errors="replace")
        want = list(para.encode("utf-8"))
    else:  # the run's validation shard holds our ids of the validation text
        want = val[:200].tolist()
        para = tok.decode(want)
    got = tok(para).input_ids
    print(f"tokenizer: a {len(para)}-character validation paragraph encodes to "
          f"{'the same' if got == want else 'DIFFERENT'} {len(want)} ids as ours")
    if got != want:
        fail("tokenizer ids differ")
    print("PASS")


if __name__ == "__main__":
    main()
