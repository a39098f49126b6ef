#!/usr/bin/env python3
"""The PyTorch peer of titan_train on the CPU: Llama 3 of a titan_train flavor's dims, trained
in float32 with AdamW on byte tokens of a corpus, one process, as eager PyTorch runs it.

    bench_cpu_torch.py CORPUS --dim 256 --layers 6 --heads 16 --kv-heads 16 --ffn 768
        --vocab 2048 --batch 4 --seq-len 256 --steps 20 --threads 2

Prints "step_ms <median over the steps after the first>" and "tokens_per_s <...>". It shares no
code with titan_train: fused wqkv and w13 as titan_train's, RoPE, GQA, RMSNorm, SwiGLU, causal
attention as matmul, softmax and matmul (Debian 12's PyTorch 1.13 has no
scaled_dot_product_attention), cross-entropy, AdamW (lr 8e-4, betas 0.9/0.95, weight decay
0.1, gradient clipping at 1.0), the debug config's.
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.h, self.hkv, self.dh = a.heads, a.kv_heads, a.dim // a.heads
        self.attention_norm = torch.nn.Parameter(torch.ones(a.dim))
        self.ffn_norm = torch.nn.Parameter(torch.ones(a.dim))
        self.wqkv = torch.nn.Linear(a.dim, (a.heads + 2 * a.kv_heads) * self.dh, bias=False)
        self.wo = torch.nn.Linear(a.heads * self.dh, a.dim, bias=False)
        self.w13 = torch.nn.Linear(a.dim, 2 * a.ffn, bias=False)
        self.w2 = torch.nn.Linear(a.ffn, a.dim, bias=False)

    def forward(self, x, cos, sin, mask):
        B, S, _ = x.shape
        q, k, v = self.wqkv(rms(x, self.attention_norm)).split(
            [self.h * self.dh, self.hkv * self.dh, self.hkv * self.dh], dim=-1)
        q = rope(q.view(B, S, self.h, self.dh), cos, sin).transpose(1, 2)
        k = rope(k.view(B, S, self.hkv, self.dh), cos, sin).transpose(1, 2)
        v = v.view(B, S, self.hkv, self.dh).transpose(1, 2)
        if self.hkv != self.h:
            k = k.repeat_interleave(self.h // self.hkv, dim=1)
            v = v.repeat_interleave(self.h // self.hkv, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.dh) + mask
        o = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, S, -1)
        h = x + self.wo(o)
        g, u = self.w13(rms(h, self.ffn_norm)).chunk(2, dim=-1)
        return h + self.w2(F.silu(g) * u)


def rms(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, cos, sin):
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)


class Llama(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.tok = torch.nn.Embedding(a.vocab, a.dim)
        self.blocks = torch.nn.ModuleList(Block(a) for _ in range(a.layers))
        self.norm = torch.nn.Parameter(torch.ones(a.dim))
        self.out = torch.nn.Linear(a.dim, a.vocab, bias=False)
        dh = a.dim // a.heads
        freqs = 1.0 / (500000.0 ** (torch.arange(0, dh, 2).float() / dh))
        angles = torch.outer(torch.arange(a.seq_len).float(), freqs)
        self.cos, self.sin = angles.cos()[None, :, None, :], angles.sin()[None, :, None, :]
        self.mask = torch.full((a.seq_len, a.seq_len), float("-inf")).triu(1)

    def forward(self, tokens):
        x = self.tok(tokens)
        for b in self.blocks:
            x = b(x, self.cos, self.sin, self.mask)
        return self.out(rms(x, self.norm))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("corpus")
    for name, default in [("dim", 256), ("layers", 6), ("heads", 16), ("kv-heads", 16),
                          ("ffn", 768), ("vocab", 2048), ("batch", 4), ("seq-len", 256),
                          ("steps", 20), ("threads", 2)]:
        p.add_argument("--" + name, type=int, default=default)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    data = torch.tensor(list(open(a.corpus, "rb").read(8 << 20)), dtype=torch.long)
    model = Llama(a)
    opt = torch.optim.AdamW(model.parameters(), lr=8e-4, betas=(0.9, 0.95), weight_decay=0.1)
    window = a.seq_len + 1
    times = []
    for step in range(a.steps):
        start = time.perf_counter()
        at = step * a.batch * window
        batch = data[at:at + a.batch * window].view(a.batch, window)
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, a.vocab), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - start)
    step_ms = statistics.median(times[1:]) * 1e3
    print(f"loss {loss.item():.4f}")
    print(f"step_ms {step_ms:.1f}")
    print(f"tokens_per_s {a.batch * a.seq_len / step_ms * 1e3:.0f}")


if __name__ == "__main__":
    main()
