"""PyTorch twin of runtime/gpt.hpp (dev tool only; CI never runs it).

The model, the parameter names/layout, the GPT-2 init and the dd::rng stream (splitmix64 +
Box-Muller, runtime/rng.hpp) are re-implemented here bit for bit, so the C++ and PyTorch models
start from identical weights. Used by make_golden.py and compare_speed.py.
"""
import math

import torch
import torch.nn.functional as F

MASK64 = (1 << 64) - 1


class Rng:
    """dd::rng: splitmix64; uniform in (0,1]; normal = Box-Muller cosine branch (2 draws)."""

    def __init__(self, seed):
        self.state = seed & MASK64

    def next_u64(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def uniform(self):
        return float((self.next_u64() >> 11) + 1) * 2.0 ** -53

    def normal(self):
        u1 = self.uniform()
        u2 = self.uniform()
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586476925286766559 * u2)


def tensor_layout(cfg):
    """[(name, shape)] in runtime/gpt.cpp gpt_tensors() order."""
    V, T, C, L = cfg["vocab"], cfg["context"], cfg["width"], cfg["layers"]
    out = [("wte", (V, C)), ("wpe", (T, C))]
    for l in range(L):
        h = f"h.{l}."
        out += [(h + "ln_1.weight", (C,)), (h + "ln_1.bias", (C,)),
                (h + "attn.qkv.weight", (3 * C, C)), (h + "attn.qkv.bias", (3 * C,)),
                (h + "attn.proj.weight", (C, C)), (h + "attn.proj.bias", (C,)),
                (h + "ln_2.weight", (C,)), (h + "ln_2.bias", (C,)),
                (h + "mlp.fc.weight", (4 * C, C)), (h + "mlp.fc.bias", (4 * C,)),
                (h + "mlp.proj.weight", (C, 4 * C)), (h + "mlp.proj.bias", (C,))]
    out += [("ln_f.weight", (C,)), ("ln_f.bias", (C,))]
    return out


def init_params(cfg, seed):
    """gpt::init(seed): N(0,0.02) 2-D weights, 0.02/sqrt(2L) for residual projections, zero
    biases, unit LN weights; one rng stream in layout order."""
    r = Rng(seed)
    s_res = 0.02 / math.sqrt(2.0 * cfg["layers"])
    params = {}
    for name, shape in tensor_layout(cfg):
        n = math.prod(shape)
        if len(shape) == 2:
            s = s_res if ("attn.proj.weight" in name or "mlp.proj.weight" in name) else 0.02
            vals = [r.normal() * s for _ in range(n)]
            t = torch.tensor(vals, dtype=torch.float64).to(torch.float32).reshape(shape)
        elif (name.startswith("ln_") or ".ln_" in name) and name.endswith(".weight"):
            t = torch.ones(shape)
        else:
            t = torch.zeros(shape)
        params[name] = t
    return params


def forward(params, cfg, idx, targets):
    """Mean cross-entropy (nats/token) of GPT-2 with a tied LM head; idx, targets (B,T) int64."""
    B, T = idx.shape
    C, NH, L = cfg["width"], cfg["heads"], cfg["layers"]
    hs = C // NH
    x = params["wte"][idx] + params["wpe"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        h = f"h.{l}."
        y = F.layer_norm(x, (C,), params[h + "ln_1.weight"], params[h + "ln_1.bias"], 1e-5)
        qkv = y @ params[h + "attn.qkv.weight"].T + params[h + "attn.qkv.bias"]
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, NH, hs).transpose(1, 2)
        k = k.view(B, T, NH, hs).transpose(1, 2)
        v = v.view(B, T, NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + y @ params[h + "attn.proj.weight"].T + params[h + "attn.proj.bias"]
        y = F.layer_norm(x, (C,), params[h + "ln_2.weight"], params[h + "ln_2.bias"], 1e-5)
        y = F.gelu(y @ params[h + "mlp.fc.weight"].T + params[h + "mlp.fc.bias"], approximate="tanh")
        x = x + y @ params[h + "mlp.proj.weight"].T + params[h + "mlp.proj.bias"]
    x = F.layer_norm(x, (C,), params["ln_f.weight"], params["ln_f.bias"], 1e-5)
    logits = x @ params["wte"].T
    return F.cross_entropy(logits.view(B * T, -1), targets.reshape(-1))


def lr_at(step, lr, warmup, total, min_ratio):
    """runtime/lr_schedule.cpp lr_schedule::at."""
    if step < warmup:
        return lr * (step + 1) / warmup
    floor = min_ratio * lr
    if step >= total or total <= warmup:
        return floor
    p = (step - warmup) / (total - warmup)
    return floor + 0.5 * (lr - floor) * (1.0 + math.cos(math.pi * p))


def make_optimizer(params, lr, wd):
    """AdamW(0.9, 0.95, eps 1e-8); weight decay only on 2-D tensors (runtime/adamw.hpp)."""
    decay = [p for p in params.values() if p.dim() == 2]
    no_decay = [p for p in params.values() if p.dim() != 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8)
