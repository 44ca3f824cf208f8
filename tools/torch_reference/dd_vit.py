"""PyTorch twin of runtime/vit.hpp (dev tool only; CI never runs it).

The layout, the init (dd::rng stream, as dd_gpt.py) and the forward pass are written from the
description in runtime/vit.hpp, independently of the C++ code: patches by unfold, attention by
scaled_dot_product-style matmuls with no mask, the loss by F.cross_entropy; autograd gives the
gradients. Used by make_vit_golden.py.
"""
import math

import torch
import torch.nn.functional as F

from dd_gpt import Rng


def tensor_layout(cfg):
    """[(name, shape, decay)] in runtime/vit.cpp vit_tensors() order."""
    C, K, L, p = cfg["width"], cfg["classes"], cfg["layers"], cfg["patch"]
    P = (cfg["rows"] // p) * (cfg["cols"] // p)
    cls = cfg["pooling"] == "cls"
    T = P + (1 if cls else 0)
    out = [("patch_embed.weight", (C, p * p), True), ("patch_embed.bias", (C,), False)]
    if cls:
        out.append(("cls_token", (1, C), False))
    out.append(("pos_embed", (T, C), False))
    for l in range(L):
        h = f"h.{l}."
        out += [(h + "ln_1.weight", (C,), False), (h + "ln_1.bias", (C,), False),
                (h + "attn.qkv.weight", (3 * C, C), True), (h + "attn.qkv.bias", (3 * C,), False),
                (h + "attn.proj.weight", (C, C), True), (h + "attn.proj.bias", (C,), False),
                (h + "ln_2.weight", (C,), False), (h + "ln_2.bias", (C,), False),
                (h + "mlp.fc.weight", (4 * C, C), True), (h + "mlp.fc.bias", (4 * C,), False),
                (h + "mlp.proj.weight", (C, 4 * C), True), (h + "mlp.proj.bias", (C,), False)]
    out += [("ln_f.weight", (C,), False), ("ln_f.bias", (C,), False),
            ("head.weight", (K, C), True), ("head.bias", (K,), False)]
    return out


def init_params(cfg, seed):
    """vit::init(seed): every 2-D tensor N(0, 0.02^2), residual projections 0.02/sqrt(2L), LN
    weights 1, biases 0; one dd::rng stream in layout order."""
    r = Rng(seed)
    s_res = 0.02 / math.sqrt(2.0 * cfg["layers"])
    params = {}
    for name, shape, _ in tensor_layout(cfg):
        n = math.prod(shape)
        if len(shape) == 2:
            s = s_res if (name.endswith("attn.proj.weight") or name.endswith("mlp.proj.weight")) else 0.02
            vals = [r.normal() * s for _ in range(n)]
            t = torch.tensor(vals, dtype=torch.float64).to(torch.float32).reshape(shape)
        elif "ln_" in name and name.endswith(".weight"):
            t = torch.ones(shape)
        else:
            t = torch.zeros(shape)
        params[name] = t
    return params


def forward(params, cfg, pixels, labels):
    """Mean cross-entropy (nats/image) and logits; pixels (B, rows, cols) int64 in [0,255]."""
    B = pixels.shape[0]
    C, NH, L, p = cfg["width"], cfg["heads"], cfg["layers"], cfg["patch"]
    hs = C // NH
    x = pixels.to(torch.float32).unsqueeze(1) / 255.0                     # (B,1,H,W)
    patches = F.unfold(x, kernel_size=p, stride=p).transpose(1, 2)        # (B,P,p*p) row-major
    tok = patches @ params["patch_embed.weight"].T + params["patch_embed.bias"]
    if cfg["pooling"] == "cls":
        tok = torch.cat([params["cls_token"].expand(B, 1, C), tok], dim=1)
    x = tok + params["pos_embed"]
    T = x.shape[1]
    for l in range(L):
        h = f"h.{l}."
        y = F.layer_norm(x, (C,), params[h + "ln_1.weight"], params[h + "ln_1.bias"], 1e-5)
        qkv = y @ params[h + "attn.qkv.weight"].T + params[h + "attn.qkv.bias"]
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, NH, hs).transpose(1, 2)
        k = k.view(B, T, NH, hs).transpose(1, 2)
        v = v.view(B, T, NH, hs).transpose(1, 2)
        att = ((q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))).softmax(dim=-1)  # no mask
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + y @ params[h + "attn.proj.weight"].T + params[h + "attn.proj.bias"]
        y = F.layer_norm(x, (C,), params[h + "ln_2.weight"], params[h + "ln_2.bias"], 1e-5)
        y = F.gelu(y @ params[h + "mlp.fc.weight"].T + params[h + "mlp.fc.bias"], approximate="tanh")
        x = x + y @ params[h + "mlp.proj.weight"].T + params[h + "mlp.proj.bias"]
    x = F.layer_norm(x, (C,), params["ln_f.weight"], params["ln_f.bias"], 1e-5)
    pooled = x[:, 0] if cfg["pooling"] == "cls" else x.mean(dim=1)
    logits = pooled @ params["head.weight"].T + params["head.bias"]
    return F.cross_entropy(logits, labels), logits


def make_optimizer(params, cfg, lr, wd):
    """AdamW(0.9, 0.95, eps 1e-8); weight decay by the layout's decay flags."""
    decay_names = {n for n, _, d in tensor_layout(cfg) if d}
    decay = [p for n, p in params.items() if n in decay_names]
    no_decay = [p for n, p in params.items() if n not in decay_names]
    return torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8)
