#!/usr/bin/env python3
"""PyTorch's side of scripts/bench_generate.sh: greedy decoding of a Hugging Face Llama folder
with a KV cache, in eager PyTorch on the CPU, timed per token.

Independent of titan_train: it parses the safetensors files itself (8-byte length, JSON header,
raw bytes through numpy), reads config.json and computes Llama 3 as transformers does (HF's
names, rotate-half RoPE with llama3 rope_scaling, grouped-query attention, RMSNorm, SwiGLU), in
float32. To be a fair opponent it fuses q/k/v and gate/up into one GEMM each (as titan_generate
does), keeps a preallocated cache [1, Hkv, S_max, Dh] per layer written in place, attends with
the query heads of a kv head grouped (no repeated K/V), and runs under torch.inference_mode().

    bench_generate_torch.py HF_FOLDER --prompt-ids 256,73,110 --new-tokens 200 --threads 1

Prints one JSON line: the threads, the prefill time, the decode time (from the end of the
prefill to the last token, which the decode steps after the first token took), the seconds per
decoded token, and the generated ids (so the caller can check they are titan_generate's).
"""
import argparse
import json
import math
import os
import struct
import time

import numpy as np
import torch

DTYPES = {"F32": np.float32, "BF16": np.uint16, "F16": np.float16, "F64": np.float64}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = np.frombuffer(data[8 + n + begin:8 + n + end], dtype=DTYPES[info["dtype"]])
        if info["dtype"] == "BF16":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        out[name] = torch.from_numpy(raw.astype(np.float32).reshape(info["shape"]).copy())
    return out


def read_folder(folder):
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    weights = {}
    for name in files:
        weights.update(read_safetensors(os.path.join(folder, name)))
    return weights


def rope_inv_freq(config, head_dim):
    theta = config.get("rope_theta", 10000.0)
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    scaling = config.get("rope_scaling")
    if not scaling:
        return inv_freq
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_context = scaling["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_context / low, old_context / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


class Llama:
    def __init__(self, config, w, max_seq):
        self.D = config["hidden_size"]
        self.H = config["num_attention_heads"]
        self.Hkv = config.get("num_key_value_heads", self.H)
        self.Dh = self.D // self.H
        self.eps = config["rms_norm_eps"]
        self.embed = w["model.embed_tokens.weight"]
        self.layers = []
        for i in range(config["num_hidden_layers"]):
            p = f"model.layers.{i}."
            self.layers.append({
                "attn_norm": w[p + "input_layernorm.weight"],
                "qkv": torch.cat([w[p + "self_attn.q_proj.weight"], w[p + "self_attn.k_proj.weight"],
                                  w[p + "self_attn.v_proj.weight"]]).contiguous(),
                "o": w[p + "self_attn.o_proj.weight"],
                "ffn_norm": w[p + "post_attention_layernorm.weight"],
                "gate_up": torch.cat([w[p + "mlp.gate_proj.weight"],
                                      w[p + "mlp.up_proj.weight"]]).contiguous(),
                "down": w[p + "mlp.down_proj.weight"],
                "k": torch.zeros(1, self.Hkv, max_seq, self.Dh),
                "v": torch.zeros(1, self.Hkv, max_seq, self.Dh),
            })
        self.norm = w["model.norm.weight"]
        self.head = w.get("lm_head.weight", self.embed)
        freqs = torch.outer(torch.arange(max_seq, dtype=torch.float64), rope_inv_freq(config, self.Dh))
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos, self.sin = emb.cos().float(), emb.sin().float()  # [S_max, Dh]

    def rms_norm(self, x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * weight

    def rope(self, x, cos, sin):  # x [1, heads, S, Dh]
        half = self.Dh // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def forward(self, ids, start):
        """Logits of the last of `ids` (fed at positions start, start + 1, …)."""
        S = ids.shape[0]
        end = start + S
        cos, sin = self.cos[start:end], self.sin[start:end]
        group = self.H // self.Hkv
        mask = None
        if S > 1:  # prefill: causal within the new rows
            mask = torch.full((S, end), float("-inf")).triu(start + 1)
        h = self.embed[ids].unsqueeze(0)  # [1, S, D]
        for layer in self.layers:
            x = self.rms_norm(h, layer["attn_norm"])
            qkv = torch.nn.functional.linear(x, layer["qkv"])
            q, k, v = qkv.split([self.H * self.Dh, self.Hkv * self.Dh, self.Hkv * self.Dh], dim=-1)
            q = self.rope(q.view(1, S, self.H, self.Dh).transpose(1, 2), cos, sin)
            k = self.rope(k.view(1, S, self.Hkv, self.Dh).transpose(1, 2), cos, sin)
            layer["k"][:, :, start:end] = k
            layer["v"][:, :, start:end] = v.view(1, S, self.Hkv, self.Dh).transpose(1, 2)
            keys, values = layer["k"][:, :, :end], layer["v"][:, :, :end]
            # The query heads of each kv head together: [1, Hkv, group·S, Dh].
            qg = q.reshape(1, self.Hkv, group * S, self.Dh)
            scores = qg @ keys.transpose(-1, -2) / math.sqrt(self.Dh)  # [1, Hkv, group·S, end]
            if mask is not None:
                scores = scores.view(1, self.Hkv, group, S, end) + mask
                scores = scores.view(1, self.Hkv, group * S, end)
            attn = torch.softmax(scores, dim=-1) @ values  # [1, Hkv, group·S, Dh]
            attn = attn.view(1, self.H, S, self.Dh).transpose(1, 2).reshape(1, S, self.D)
            h = h + torch.nn.functional.linear(attn, layer["o"])
            x = self.rms_norm(h, layer["ffn_norm"])
            gate, up = torch.nn.functional.linear(x, layer["gate_up"]).chunk(2, dim=-1)
            h = h + torch.nn.functional.linear(torch.nn.functional.silu(gate) * up, layer["down"])
        return torch.nn.functional.linear(self.rms_norm(h[:, -1], self.norm), self.head)[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--prompt-ids", required=True, help="comma-separated token ids")
    parser.add_argument("--new-tokens", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--repeats", type=int, default=3, help="runs; the fastest is reported")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with open(os.path.join(args.folder, "config.json")) as f:
        config = json.load(f)
    prompt = torch.tensor([int(t) for t in args.prompt_ids.split(",")], dtype=torch.long)
    model = Llama(config, read_folder(args.folder), len(prompt) + args.new_tokens)
    best = None
    with torch.inference_mode():
        for _ in range(args.repeats):
            start = time.perf_counter()
            logits = model.forward(prompt, 0)
            prefilled = time.perf_counter()
            ids = [int(torch.argmax(logits))]
            for step in range(1, args.new_tokens):
                logits = model.forward(torch.tensor([ids[-1]]), len(prompt) + step - 1)
                ids.append(int(torch.argmax(logits)))
            done = time.perf_counter()
            run = {"threads": args.threads, "prefill_seconds": prefilled - start,
                   "decode_seconds": done - prefilled,
                   "seconds_per_token": (done - prefilled) / (args.new_tokens - 1), "ids": ids}
            if best is None or run["decode_seconds"] < best["decode_seconds"]:
                best = run
    print(json.dumps(best))


if __name__ == "__main__":
    main()
