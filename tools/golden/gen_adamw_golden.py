#!/usr/bin/env python3
"""Generates training/testdata/optim_golden.safetensors: a few steps of torch.optim.AdamW and
torch.optim.SGD on fixed data, for training/optim_test.cc (matched at 1e-6 relative).

    python3 tools/golden/gen_adamw_golden.py

Needs torch and safetensors. Deterministic (fixed seed). Three parameters of shapes (5, 7),
(37,) and (3, 4, 5) are updated by each optimizer (single-tensor implementation, foreach=False,
as on CPU); the fixture stores them flattened and concatenated (132 values), which is how the
C++ optimizers see a parameter arena.

Tensors (f32):
  params.init             [132]     the starting parameters
  grads                   [S, 132]  the gradient given at each step (scales 1, 1e-3, 10, 1,
                                    0.1; a third of step 2's entries are exactly zero)
  adamw.params            [S, 132]  parameters after each step, and the state:
  adamw.exp_avg           [S, 132]
  adamw.exp_avg_sq        [S, 132]
  sgd_nesterov.params / .momentum_buffer   SGD(momentum=0.9, nesterov=True, weight_decay=0.01)
  sgd_damp.params / .momentum_buffer       SGD(momentum=0.8, dampening=0.1)
Metadata (strings, Python repr so doubles are exact): steps, lrs (comma-separated, the lr set
before each step; one is 0), and each optimizer's hyperparameters.
"""

import os

import torch
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "training", "testdata", "optim_golden.safetensors")

SHAPES = [(5, 7), (37,), (3, 4, 5)]
LRS = [1e-2, 5e-3, 2e-2, 0.0, 1e-3]
SCALES = [1.0, 1e-3, 10.0, 1.0, 0.1]
ADAMW = dict(betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
SGD = {
    "sgd_nesterov": dict(momentum=0.9, dampening=0.0, nesterov=True, weight_decay=0.01),
    "sgd_damp": dict(momentum=0.8, dampening=0.1, nesterov=False, weight_decay=0.0),
}


def flat(ts):
    return torch.cat([t.detach().reshape(-1) for t in ts])


def run(make_opt, init, grads, state_keys):
    params = [p.clone().requires_grad_(True) for p in init]
    opt = make_opt(params)
    out = {"params": []}
    for k in state_keys:
        out[k] = []
    for step, lr in enumerate(LRS):
        for g in opt.param_groups:
            g["lr"] = lr
        for p, g in zip(params, grads[step]):
            p.grad = g.clone()
        opt.step()
        out["params"].append(flat(params))
        for k in state_keys:
            out[k].append(flat([opt.state[p][k] for p in params]))
    return {k: torch.stack(v) for k, v in out.items()}


def main():
    torch.manual_seed(20240611)
    init = [torch.randn(s) for s in SHAPES]
    grads = []
    for step, scale in enumerate(SCALES):
        gs = [torch.randn(s) * scale for s in SHAPES]
        if step == 2:
            for g in gs:
                g.view(-1)[::3] = 0.0
        grads.append(gs)

    tensors = {
        "params.init": flat(init),
        "grads": torch.stack([flat(g) for g in grads]),
    }
    adamw = run(lambda ps: torch.optim.AdamW(ps, lr=LRS[0], foreach=False, **ADAMW),
                init, grads, ["exp_avg", "exp_avg_sq"])
    for k, v in adamw.items():
        tensors[f"adamw.{k}"] = v
    meta = {
        "steps": str(len(LRS)),
        "lrs": ",".join(repr(x) for x in LRS),
        "adamw.beta1": repr(ADAMW["betas"][0]),
        "adamw.beta2": repr(ADAMW["betas"][1]),
        "adamw.eps": repr(ADAMW["eps"]),
        "adamw.weight_decay": repr(ADAMW["weight_decay"]),
        "torch": torch.__version__,
    }
    for name, cfg in SGD.items():
        res = run(lambda ps: torch.optim.SGD(ps, lr=LRS[0], foreach=False, **cfg),
                  init, grads, ["momentum_buffer"])
        for k, v in res.items():
            tensors[f"{name}.{k}"] = v
        for k, v in cfg.items():
            meta[f"{name}.{k}"] = repr(float(v))
    tensors = {k: v.contiguous().to(torch.float32) for k, v in tensors.items()}
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    save_file(tensors, OUT, metadata=meta)
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    main()
