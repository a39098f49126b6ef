#!/usr/bin/env python3
"""An independent float64 Muon, written from the published algorithm (Jordan et al., 2024;
the update scale of Liu et al., 2025), checked against the steps a titan_train run saved.

It uses none of titan_train's code: it reads the sharded checkpoints itself (metadata.json, then
each stored piece's bytes from its rank file, placed at its global offsets), and for every hidden
matrix (a block's wqkv, wo, w13, w2; wqkv split into wq, wk, wv and w13 into w1, w3, as the
model's own matrices) recomputes each step's update in float64 from the step's gradient:

    M_t = beta*M_(t-1) + (1-beta)*G_t              (Nesterov)  U_t = (1-beta)*G_t + beta*M_t
    O_t = NewtonSchulz5(U_t)                        X <- U/(|U|_F + 1e-7); 5 times:
                                                    A = X X^T; B = b A + c A A; X = a X + B X
                                                    (on the transpose when rows > cols)
    W_t = W_(t-1)*(1 - lr_t*wd) - lr_t*0.2*sqrt(max(rows, cols))*O_t

The gradient comes from the saved momentum, G_t = (M_t - beta*M_(t-1))/(1-beta); that the
momentum itself is right is checked against the run's logged gradient norms: the gradients
recovered from every parameter's first moment (Muon's buffers, AdamW's exp_avg) must have the
logged norm, clipped to max_norm.

    muon_reference.py START STEP1 STEP2 --lr LR1 LR2 --grad-norm N1 N2 --max-norm C
                      [--momentum 0.95] [--weight-decay 0.1] [--beta1 0.9]

START is the step folder the run started from (its weights, its optimizer state unused), STEP1
and STEP2 the run's first two. Prints, per step, "step T update_error E norm_error F" with E the
worst over the matrices of |dW - dW_ref|_F / |dW_ref|_F and F the relative error of the
gradient norm.

Needs Debian 12's python3-torch (1.13) and python3-numpy.
"""
import argparse
import json
import math
import os
import re
import sys

import numpy as np
import torch

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
HIDDEN = re.compile(r"^layers\.[0-9]+\.(attention\.(wqkv|wo)|feed_forward\.(w13|w2))\.weight$")


def read_checkpoint(folder):
    """(metadata, name -> float64 tensor) for one step folder of a sharded checkpoint."""
    with open(os.path.join(folder, "metadata.json")) as f:
        meta = json.load(f)
    files = [open(os.path.join(folder, entry["name"]), "rb").read() for entry in meta["files"]]
    tensors = {}
    for name, info in meta["tensors"].items():
        assert info["dtype"] == "F32", (name, info["dtype"])
        full = np.zeros(info["shape"], dtype=np.float64)
        for piece in info["pieces"]:
            begin, end = piece["byte_range"]
            values = np.frombuffer(files[piece["file"]][begin:end], dtype=np.float32)
            index = tuple(slice(o, o + s) for o, s in zip(piece["offsets"], piece["sizes"]))
            full[index] = values.reshape(piece["sizes"])
        tensors[name] = torch.from_numpy(full)
    return meta, tensors


def newton_schulz5(g, steps=5):
    a, b, c = NS_COEFFICIENTS
    x = g.clone()
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    x = x / (torch.linalg.norm(x) + 1e-7)
    for _ in range(steps):
        m = x @ x.T
        n = b * m + c * (m @ m)
        x = a * x + n @ x
    return x.T if tall else x


def parts(name, model):
    """The row counts of the matrices a fused weight stacks."""
    head_dim = model["dim"] // model["n_heads"]
    if name.endswith("wqkv.weight"):
        return [model["n_heads"] * head_dim, model["n_kv_heads"] * head_dim,
                model["n_kv_heads"] * head_dim]
    if name.endswith("w13.weight"):
        return [model["ffn_dim"], model["ffn_dim"]]
    return None


def muon_update(u, name, model):
    """-(0.2 sqrt(max(rows, cols)) O) of each part, stacked: the update before the lr."""
    pieces = []
    row = 0
    for rows in parts(name, model) or [u.shape[0]]:
        part = u[row:row + rows]
        scale = 0.2 * math.sqrt(max(part.shape))
        pieces.append(scale * newton_schulz5(part))
        row += rows
    return torch.cat(pieces)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("start")
    parser.add_argument("steps", nargs=2)
    parser.add_argument("--lr", type=float, nargs=2, required=True)
    parser.add_argument("--grad-norm", type=float, nargs=2, required=True)
    parser.add_argument("--max-norm", type=float, required=True)
    parser.add_argument("--momentum", type=float, default=0.95)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--beta1", type=float, default=0.9)
    args = parser.parse_args()

    _, previous = read_checkpoint(args.start)
    model = None
    beta = args.momentum
    prev_momentum = {}
    prev_exp_avg = {}
    for t, folder in enumerate(args.steps):
        meta, now = read_checkpoint(folder)
        if meta["optimizer"] != "Muon":
            sys.exit(f"{folder} was saved by {meta['optimizer']}, not Muon")
        model = meta["model"]
        lr = args.lr[t]
        worst = 0.0
        squared = 0.0
        for name in sorted(n for n in now if HIDDEN.match(n)):
            m = now[name + ".momentum_buffer"]
            m_prev = prev_momentum.get(name, torch.zeros_like(m))
            g = (m - beta * m_prev) / (1 - beta)
            squared += float((g * g).sum())
            u = (1 - beta) * g + beta * m
            expected = -lr * args.weight_decay * previous[name] - lr * muon_update(u, name, model)
            got = now[name] - previous[name]
            error = float(torch.linalg.norm(got - expected) / torch.linalg.norm(expected))
            worst = max(worst, error)
            prev_momentum[name] = m
        for name in now:
            if name.endswith(".exp_avg"):
                m = now[name]
                m_prev = prev_exp_avg.get(name, torch.zeros_like(m))
                g = (m - args.beta1 * m_prev) / (1 - args.beta1)
                squared += float((g * g).sum())
                prev_exp_avg[name] = m
        logged = args.grad_norm[t]
        # clip_grad_norm_: scaled by max_norm / (norm + 1e-6) when that is below 1.
        coef = args.max_norm / (logged + 1e-6) if args.max_norm > 0 else 1.0
        clipped = logged * min(1.0, coef)
        norm_error = abs(math.sqrt(squared) - clipped) / clipped
        print(f"step {t + 1} update_error {worst:.3e} norm_error {norm_error:.3e}")
        previous = now


if __name__ == "__main__":
    main()
