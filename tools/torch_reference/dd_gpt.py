"""PyTorch twin of runtime/gpt.hpp (dev tool only; CI never runs it).

The model, the parameter names/layout, the GPT-2 init and the dd::rng stream (splitmix64 +
Box-Muller, runtime/rng.hpp) are re-implemented here bit for bit, so the C++ and PyTorch models
start from identical weights. Used by make_golden.py and compare_speed.py.
"""
import math
import time

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


def attention_tensors(h, C):
    """[(name, shape)] of block h's (e.g. "h.0.") tensors up to ln_2, as attention_half reads
    them: the same in gpt, moe_gpt and vit."""
    return [(h + "ln_1.weight", (C,)), (h + "ln_1.bias", (C,)),
            (h + "attn.qkv.weight", (3 * C, C)), (h + "attn.qkv.bias", (3 * C,)),
            (h + "attn.proj.weight", (C, C)), (h + "attn.proj.bias", (C,)),
            (h + "ln_2.weight", (C,)), (h + "ln_2.bias", (C,))]


def mlp_tensors(prefix, C):
    """[(name, shape)] of a GELU MLP C -> 4C -> C named prefix + "fc.weight" etc."""
    return [(prefix + "fc.weight", (4 * C, C)), (prefix + "fc.bias", (4 * C,)),
            (prefix + "proj.weight", (C, 4 * C)), (prefix + "proj.bias", (C,))]


def tensor_layout(cfg):
    """[(name, shape)] in runtime/gpt.cpp gpt_tensors() order."""
    V, T, C, L = cfg["vocab"], cfg["context"], cfg["width"], cfg["layers"]
    out = [("wte", (V, C)), ("wpe", (T, C))]
    for l in range(L):
        h = f"h.{l}."
        out += attention_tensors(h, C) + mlp_tensors(h + "mlp.", C)
    out += [("ln_f.weight", (C,)), ("ln_f.bias", (C,))]
    return out


def init_from_layout(layout, seed, layers, residual):
    """The init of runtime/gpt.cpp, vit.cpp and moe_gpt.cpp: one dd::rng stream in layout order
    over layout [(name, shape, ...)]; N(0,0.02) for 2-D tensors, 0.02/sqrt(2 * layers) for those
    residual(name) names; LN weights 1; everything else 0."""
    r = Rng(seed)
    s_res = 0.02 / math.sqrt(2.0 * layers)
    params = {}
    for name, shape, *_ in layout:
        n = math.prod(shape)
        if len(shape) == 2:
            s = s_res if residual(name) else 0.02
            vals = [r.normal() * s for _ in range(n)]
            t = torch.tensor(vals, dtype=torch.float64).to(torch.float32).reshape(shape)
        elif "ln_" in name and name.endswith(".weight"):
            t = torch.ones(shape)
        else:
            t = torch.zeros(shape)
        params[name] = t
    return params


def init_params(cfg, seed):
    """gpt::init(seed): N(0,0.02) 2-D weights, 0.02/sqrt(2L) for residual projections, zero
    biases, unit LN weights; one rng stream in layout order."""
    return init_from_layout(tensor_layout(cfg), seed, cfg["layers"],
                            lambda name: name.endswith(("attn.proj.weight", "mlp.proj.weight")))


def attention_half(x, params, h, NH, mask):
    """The first half of pre-LN block h (e.g. "h.0."): x + attention(ln_1(x)) and ln_2 of that.
    mask (T,T) bool keeps the True positions; None attends everywhere."""
    B, T, C = x.shape
    hs = C // NH
    y = F.layer_norm(x, (C,), params[h + "ln_1.weight"], params[h + "ln_1.bias"], 1e-5)
    qkv = y @ params[h + "attn.qkv.weight"].T + params[h + "attn.qkv.bias"]
    q, k, v = qkv.split(C, dim=2)
    q = q.view(B, T, NH, hs).transpose(1, 2)
    k = k.view(B, T, NH, hs).transpose(1, 2)
    v = v.view(B, T, NH, hs).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
    if mask is not None:
        att = att.masked_fill(~mask, float("-inf"))
    y = (att.softmax(dim=-1) @ v).transpose(1, 2).contiguous().view(B, T, C)
    x = x + y @ params[h + "attn.proj.weight"].T + params[h + "attn.proj.bias"]
    y = F.layer_norm(x, (C,), params[h + "ln_2.weight"], params[h + "ln_2.bias"], 1e-5)
    return x, y


def decoder_loss(params, cfg, idx, targets, second_half):
    """Mean cross-entropy (nats/token) of a pre-LN decoder with a tied LM head; idx, targets
    (B,T) int64. Block h is attention_half, then x = second_half(x, y, h) with y = ln_2 of x."""
    B, T = idx.shape
    C, NH, L = cfg["width"], cfg["heads"], cfg["layers"]
    x = params["wte"][idx] + params["wpe"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        h = f"h.{l}."
        x, y = attention_half(x, params, h, NH, mask)
        x = second_half(x, y, h)
    x = F.layer_norm(x, (C,), params["ln_f.weight"], params["ln_f.bias"], 1e-5)
    logits = x @ params["wte"].T
    return F.cross_entropy(logits.view(B * T, -1), targets.reshape(-1))


def mlp_half(params, x, y, h):
    """x + the GELU MLP of block h applied to y."""
    y = F.gelu(y @ params[h + "mlp.fc.weight"].T + params[h + "mlp.fc.bias"], approximate="tanh")
    return x + y @ params[h + "mlp.proj.weight"].T + params[h + "mlp.proj.bias"]


def forward(params, cfg, idx, targets):
    """Mean cross-entropy (nats/token) of GPT-2 with a tied LM head; idx, targets (B,T) int64."""
    return decoder_loss(params, cfg, idx, targets, lambda x, y, h: mlp_half(params, x, y, h))


def lr_at(step, lr, warmup, total, min_ratio):
    """runtime/lr_schedule.cpp lr_schedule::at."""
    if step < warmup:
        return lr * (step + 1) / warmup
    floor = min_ratio * lr
    if step >= total or total <= warmup:
        return floor
    p = (step - warmup) / (total - warmup)
    return floor + 0.5 * (lr - floor) * (1.0 + math.cos(math.pi * p))


def set_step_lr(opt, step, hp):
    """Sets every parameter group's learning rate to lr_at(step) of the hyperparameters hp."""
    lr = lr_at(step, hp["lr"], hp["warmup"], hp["total"], hp["min_lr_ratio"])
    for g in opt.param_groups:
        g["lr"] = lr


def text_batches(text, B, T, steps):
    """steps batches of B consecutive windows of T + 1 bytes from the start of text:
    [{"tokens": (B,T), "targets": (B,T)}], the targets the tokens shifted by one."""
    batches = []
    for s in range(steps):
        rows = [list(text[(s * B + b) * T:(s * B + b) * T + T + 1]) for b in range(B)]
        batches.append({"tokens": [r[:T] for r in rows], "targets": [r[1:] for r in rows]})
    return batches


def batch_tensors(batch):
    """(tokens, targets) of one text_batches entry as int64 tensors."""
    return (torch.tensor(batch["tokens"], dtype=torch.int64),
            torch.tensor(batch["targets"], dtype=torch.int64))


def tokens_per_second(params, cfg, opt, data, B, T, steps, gen, sync=lambda: None):
    """Training speed: steps timed AdamW steps (after 3 untimed) on B random windows of T tokens
    of data (int64 on the parameters' device) drawn with gen; sync() waits for the device."""
    elapsed, tokens = 0.0, 0
    for s in range(steps + 3):
        ix = torch.randint(0, len(data) - T - 1, (B,), generator=gen, device=data.device)
        x = torch.stack([data[i:i + T] for i in ix])
        y = torch.stack([data[i + 1:i + T + 1] for i in ix])
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = forward(params, cfg, x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        sync()
        if s >= 3:
            elapsed += time.perf_counter() - t0
            tokens += B * T
    return tokens / elapsed


def make_optimizer(params, lr, wd):
    """AdamW(0.9, 0.95, eps 1e-8); weight decay only on 2-D tensors (runtime/adamw.hpp)."""
    decay = [p for p in params.values() if p.dim() == 2]
    no_decay = [p for p in params.values() if p.dim() != 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8)
