#!/usr/bin/env python3
"""An independent Llama 3 forward pass over a Hugging Face folder: the check that a folder
titan_train exports means what HF means by it.

It uses none of titan_train's code: it parses the safetensors files itself (8-byte length, JSON
header, raw bytes through numpy; bf16 as uint16 << 16), follows the index when there is one,
reads config.json, and computes Llama 3 the way transformers' LlamaForCausalLM does, with HF's
tensor names and conventions: rotate-half RoPE (llama3 rope_scaling when the config has it),
grouped-query attention (q head i uses kv head i // (H / Hkv)), RMSNorm, SwiGLU, a causal
mask, and the mean cross-entropy of next-token prediction. Everything runs in float64.

    hf_llama_reference.py HF_FOLDER TOKENS_TXT --seq-len S --batch B [--peft ADAPTER_FOLDER]

With --peft, the LoRA adapters of a PEFT folder (adapter_config.json, adapter_model.safetensors)
are applied to the base weights first, as peft's merge does: W += (lora_alpha / r) · B · A for
each module base_model.model.<name>.lora_A/B.weight.

TOKENS_TXT holds whitespace-separated token ids; sequence b is ids [b·S, b·S + S + 1) (inputs
the first S, targets the last S), as titan_train's validation reads windows. Prints
"loss <value>" with 17 significant digits.

Needs Debian 12's python3-torch (1.13) and python3-numpy.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch

DTYPES = {"F32": np.float32, "F64": np.float64, "BF16": np.uint16, "F16": np.float16}


def read_safetensors(path):
    """name -> float64 torch tensor, for every tensor in one file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = np.frombuffer(data[base + begin:base + end], dtype=DTYPES[info["dtype"]])
        if info["dtype"] == "BF16":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        out[name] = torch.from_numpy(raw.astype(np.float64).reshape(info["shape"]))
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
    assert scaling.get("rope_type", scaling.get("type")) == "llama3", scaling
    # transformers' _compute_llama3_parameters
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_context = scaling["original_max_position_embeddings"]
    low_freq_wavelen, high_freq_wavelen = old_context / low, old_context / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return torch.where(medium, smoothed, scaled)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def llama_loss(config, w, inputs, targets):
    logits = llama_logits(config, w, inputs)
    B, S = inputs.shape
    return torch.nn.functional.cross_entropy(logits.reshape(B * S, -1), targets.reshape(B * S))


def llama_logits(config, w, inputs):
    """[B, S] token ids -> [B, S, V] float64 logits."""
    B, S = inputs.shape
    D = config["hidden_size"]
    H = config["num_attention_heads"]
    Hkv = config.get("num_key_value_heads", H)
    Dh = config.get("head_dim", D // H)
    eps = config["rms_norm_eps"]
    inv_freq = rope_inv_freq(config, Dh)
    freqs = torch.outer(torch.arange(S, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()  # [S, Dh]
    mask = torch.full((S, S), float("-inf"), dtype=torch.float64).triu(1)

    h = w["model.embed_tokens.weight"][inputs]  # [B, S, D]
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        x = rms_norm(h, w[p + "input_layernorm.weight"], eps)
        q = (x @ w[p + "self_attn.q_proj.weight"].T).view(B, S, H, Dh).transpose(1, 2)
        k = (x @ w[p + "self_attn.k_proj.weight"].T).view(B, S, Hkv, Dh).transpose(1, 2)
        v = (x @ w[p + "self_attn.v_proj.weight"].T).view(B, S, Hkv, Dh).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(Dh) + mask
        attn = torch.softmax(scores, dim=-1) @ v  # [B, H, S, Dh]
        attn = attn.transpose(1, 2).reshape(B, S, H * Dh)
        h = h + attn @ w[p + "self_attn.o_proj.weight"].T
        x = rms_norm(h, w[p + "post_attention_layernorm.weight"], eps)
        gate = torch.nn.functional.silu(x @ w[p + "mlp.gate_proj.weight"].T)
        up = x @ w[p + "mlp.up_proj.weight"].T
        h = h + (gate * up) @ w[p + "mlp.down_proj.weight"].T
    h = rms_norm(h, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight")
    if head is None and config.get("tie_word_embeddings"):
        head = w["model.embed_tokens.weight"]
    return h @ head.T


def apply_peft(weights, folder):
    """Merges a PEFT LoRA folder's adapters into `weights` (HF names), in place."""
    with open(os.path.join(folder, "adapter_config.json")) as f:
        config = json.load(f)
    if config.get("peft_type") != "LORA":
        sys.exit(f"hf_llama_reference: peft_type {config.get('peft_type')} is not LORA")
    scale = config["lora_alpha"] / config["r"]
    adapters = read_safetensors(os.path.join(folder, "adapter_model.safetensors"))
    prefix, suffix = "base_model.model.", ".lora_A.weight"
    merged = 0
    for name, a in adapters.items():
        if not name.endswith(suffix):
            continue
        module = name[len(prefix):-len(suffix)]
        b = adapters[prefix + module + ".lora_B.weight"]
        target = module + ".weight"
        if target not in weights:
            sys.exit(f"hf_llama_reference: the adapter {name} has no base weight {target}")
        if a.shape[0] != config["r"] or b.shape != (weights[target].shape[0], config["r"]):
            sys.exit(f"hf_llama_reference: {module}: A {tuple(a.shape)}, B {tuple(b.shape)}")
        weights[target] = weights[target] + scale * (b @ a)
        merged += 1
    if merged == 0:
        sys.exit("hf_llama_reference: the PEFT folder holds no lora_A tensors")
    return weights


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("tokens")
    parser.add_argument("--seq-len", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--peft", help="a PEFT LoRA folder to merge into the weights first")
    args = parser.parse_args()
    with open(os.path.join(args.folder, "config.json")) as f:
        config = json.load(f)
    if config.get("model_type", "llama") != "llama":
        sys.exit(f"hf_llama_reference: model_type {config['model_type']} is not llama")
    with open(args.tokens) as f:
        ids = [int(t) for t in f.read().split()]
    S, B = args.seq_len, args.batch
    if len(ids) < B * S + 1:
        sys.exit(f"hf_llama_reference: {len(ids)} tokens, fewer than {B * S + 1}")
    windows = torch.tensor([ids[b * S:b * S + S + 1] for b in range(B)], dtype=torch.long)
    weights = read_folder(args.folder)
    if args.peft:
        weights = apply_peft(weights, args.peft)
    with torch.no_grad():
        loss = llama_loss(config, weights, windows[:, :-1], windows[:, 1:])
    print(f"loss {loss.item():.17g}")


if __name__ == "__main__":
    main()
