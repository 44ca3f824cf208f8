"""A float64 NumPy forward of the GPT that dd-node trains (GPT-2's architecture: pre-LayerNorm
blocks, tanh GELU, causal attention, tied LM head), independent of the C++ code. The checks of
model files and exports score a run's evaluation windows with it.

Two spellings of the same tensors: OURS (runtime/gpt.hpp names, nn.Linear layouts: y = x W^T + b)
and HF (transformers' GPT-2 names, Conv1D layouts: y = x W + b).
"""
import math

import numpy as np

OURS = {"wte": "wte", "wpe": "wpe", "block": "h.{i}.", "qkv": "attn.qkv", "proj": "attn.proj",
        "fc": "mlp.fc", "mlp_proj": "mlp.proj", "ln_f": "ln_f", "transposed": True}
HF = {"wte": "transformer.wte.weight", "wpe": "transformer.wpe.weight",
      "block": "transformer.h.{i}.", "qkv": "attn.c_attn", "proj": "attn.c_proj",
      "fc": "mlp.c_fc", "mlp_proj": "mlp.c_proj", "ln_f": "transformer.ln_f",
      "transposed": False}


def layernorm(x, w, b, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)  # biased (kernels/reference)
    return (x - m) / np.sqrt(v + eps) * w + b


def gelu(x):
    """The tanh approximation (GPT-2's gelu_new)."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def logits(P, idx, layers, width, heads, names=OURS, eps=1e-5):
    """(B, T) token ids -> (B, T, V) logits over the float64 tensors P spelled as `names`."""
    B, T = idx.shape
    C, NH = width, heads
    hs = C // NH

    def linear(x, g, name):
        W = g(name + ".weight")
        return x @ (W.T if names["transposed"] else W) + g(name + ".bias")

    x = P[names["wte"]][idx] + P[names["wpe"]][:T]
    mask = np.triu(np.ones((T, T), dtype=bool), k=1)
    for i in range(layers):
        g = lambda n: P[names["block"].format(i=i) + n]  # noqa: E731
        h = layernorm(x, g("ln_1.weight"), g("ln_1.bias"), eps)
        qkv = linear(h, g, names["qkv"])
        q, k, v = (qkv[..., j * C:(j + 1) * C].reshape(B, T, NH, hs).transpose(0, 2, 1, 3)
                   for j in range(3))
        att = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hs)
        att = np.where(mask, -np.inf, att)
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        x = x + linear(y, g, names["proj"])
        h = layernorm(x, g("ln_2.weight"), g("ln_2.bias"), eps)
        x = x + linear(gelu(linear(h, g, names["fc"])), g, names["mlp_proj"])
    x = layernorm(x, P[names["ln_f"] + ".weight"], P[names["ln_f"] + ".bias"], eps)
    return x @ P[names["wte"]].T  # tied head


def cross_entropy(lg, tgt):
    """Mean next-token cross-entropy (nats) of (B, T, V) logits against (B, T) targets."""
    m = lg.max(-1, keepdims=True)
    lse = np.log(np.exp(lg - m).sum(-1)) + m[..., 0]
    return float((lse - np.take_along_axis(lg, tgt[..., None], -1)[..., 0]).mean())


def eval_batches(val, B, T, windows):
    """The run's evaluation windows (runtime/eval.hpp): window w starts at (w mod W)·T,
    W = (len(val) − 1) // T, taken B at a time (the last batch may be shorter). Yields (idx, tgt),
    each (rows, T)."""
    W = (len(val) - 1) // T
    for first in range(0, windows, B):
        starts = [((first + r) % W) * T for r in range(min(B, windows - first))]
        yield (np.stack([val[s:s + T] for s in starts]),
               np.stack([val[s + 1:s + T + 1] for s in starts]))
