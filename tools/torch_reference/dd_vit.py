"""PyTorch twin of runtime/vit.hpp (dev tool only; CI never runs it).

The layout, the init (dd::rng stream, dd_gpt.init_from_layout) and the forward pass are written
from the description in runtime/vit.hpp, independently of the C++ code: patches by unfold,
attention by dd_gpt.attention_half's matmuls with no mask, the loss by F.cross_entropy; autograd
gives the gradients. Used by make_vit_golden.py.
"""

import torch
import torch.nn.functional as F

import dd_gpt


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
        block = dd_gpt.attention_tensors(h, C) + dd_gpt.mlp_tensors(h + "mlp.", C)
        out += [(name, shape, len(shape) == 2) for name, shape in block]  # decay: the matrices
    out += [("ln_f.weight", (C,), False), ("ln_f.bias", (C,), False),
            ("head.weight", (K, C), True), ("head.bias", (K,), False)]
    return out


def init_params(cfg, seed):
    """vit::init(seed): every 2-D tensor N(0, 0.02^2), residual projections 0.02/sqrt(2L), LN
    weights 1, biases 0; one dd::rng stream in layout order."""
    return dd_gpt.init_from_layout(tensor_layout(cfg), seed, cfg["layers"],
                                   lambda name: name.endswith(("attn.proj.weight", "mlp.proj.weight")))


def forward(params, cfg, pixels, labels):
    """Mean cross-entropy (nats/image) and logits; pixels (B, rows, cols) int64 in [0,255]."""
    B = pixels.shape[0]
    C, NH, L, p = cfg["width"], cfg["heads"], cfg["layers"], cfg["patch"]
    x = pixels.to(torch.float32).unsqueeze(1) / 255.0                     # (B,1,H,W)
    patches = F.unfold(x, kernel_size=p, stride=p).transpose(1, 2)        # (B,P,p*p) row-major
    tok = patches @ params["patch_embed.weight"].T + params["patch_embed.bias"]
    if cfg["pooling"] == "cls":
        tok = torch.cat([params["cls_token"].expand(B, 1, C), tok], dim=1)
    x = tok + params["pos_embed"]
    T = x.shape[1]
    for l in range(L):
        h = f"h.{l}."
        x, y = dd_gpt.attention_half(x, params, h, NH, None)
        x = dd_gpt.mlp_half(params, x, y, h)
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
