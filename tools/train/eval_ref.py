#!/usr/bin/python3
"""Independent numpy reference for the shipped byte model (issue 9).

Re-implements the model's forward pass (HuggingFace Llama semantics, as in
train.py) in numpy alone, from model.safetensors, and prints
  - the held-out NLL with train.py's chunking (compare eval.json and
    `mt-probe quality --chunk 256`);
  - where attention goes: per layer and head, the mean attention weight on
    position 0 (BOS) and on positions 1..3, for queries at positions >= 32,
    next to the uniform share. This says whether the model parks attention
    on BOS the way StreamingLLM's attention sinks do (see bench/RESULTS.md).

Uses Debian's python3-numpy (/usr/bin/python3); no torch needed.
    /usr/bin/python3 tools/train/eval_ref.py [--model DIR] [--chunks N]
"""
import argparse
import json
import math
import os
import struct

import numpy as np


def load(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    raw = open(os.path.join(d, "model.safetensors"), "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    base = 8 + n
    w = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", (k, v["dtype"])
        a, b = v["data_offsets"]
        w[k] = np.frombuffer(raw[base + a:base + b], dtype="<f4").reshape(v["shape"])
    return cfg, w


def forward(cfg, w, ids):
    """Logits [T, vocab] and attention probabilities [layers, heads, T, T]."""
    T = len(ids)
    h, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps = h // nh, cfg["rms_norm_eps"]

    def rms(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g

    inv = 1.0 / (cfg["rope_theta"] ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    ang = np.arange(T)[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))

    def rope(x):  # [H, T, hd]
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return x * cos + np.concatenate([-x2, x1], -1) * sin

    x = w["model.embed_tokens.weight"][ids].astype(np.float64)
    mask = np.triu(np.full((T, T), -np.inf), 1)
    probs = []
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        a = rms(x, w[p + "input_layernorm.weight"])
        q = (a @ w[p + "self_attn.q_proj.weight"].T).reshape(T, nh, hd).transpose(1, 0, 2)
        k = (a @ w[p + "self_attn.k_proj.weight"].T).reshape(T, nkv, hd).transpose(1, 0, 2)
        v = (a @ w[p + "self_attn.v_proj.weight"].T).reshape(T, nkv, hd).transpose(1, 0, 2)
        q, k = rope(q), rope(k)
        k, v = np.repeat(k, nh // nkv, 0), np.repeat(v, nh // nkv, 0)
        s = q @ k.transpose(0, 2, 1) / math.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        probs.append(s)
        o = (s @ v).transpose(1, 0, 2).reshape(T, nh * hd)
        x = x + o @ w[p + "self_attn.o_proj.weight"].T
        a = rms(x, w[p + "post_attention_layernorm.weight"])
        g = a @ w[p + "mlp.gate_proj.weight"].T
        x = x + ((g / (1 + np.exp(-g))) * (a @ w[p + "mlp.up_proj.weight"].T)) @ \
            w[p + "mlp.down_proj.weight"].T
    x = rms(x, w["model.norm.weight"])
    return x @ w["model.embed_tokens.weight"].T, np.stack(probs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="models/fortune-byte")
    ap.add_argument("--chunks", type=int, default=0, help="0 = all")
    ap.add_argument("--from-pos", type=int, default=32,
                    help="queries at positions >= this for the attention figures")
    a = ap.parse_args()
    cfg, w = load(a.model)
    T, bos = cfg["max_position_embeddings"], cfg["bos_token_id"]
    held = open(os.path.join(a.model, "heldout.txt"), "rb").read()
    n = len(held) // T
    if a.chunks:
        n = min(n, a.chunks)
    tot, att = 0.0, None
    for c in range(n):
        chunk = list(held[c * T:(c + 1) * T])
        logits, p = forward(cfg, w, np.array([bos] + chunk[:-1]))
        m = logits.max(-1, keepdims=True)
        lse = np.log(np.exp(logits - m).sum(-1)) + m[:, 0]
        tot += float((lse - logits[np.arange(T), chunk]).sum())
        q = p[:, :, a.from_pos:, :]              # [L, H, Tq, T]
        f = np.stack([q[..., 0].mean(-1), q[..., 1:4].sum(-1).mean(-1)], -1)
        att = f if att is None else att + f
    nll = tot / (n * T)
    print(f"numpy reference: nll {nll:.6f} nats/byte, ppl {math.exp(nll):.4f} "
          f"over {n} chunks of {T}")
    att /= n
    uni = np.mean([1.0 / (t + 1) for t in range(a.from_pos, T)])
    print(f"mean attention of queries at positions {a.from_pos}..{T - 1} "
          f"(uniform share of one position: {uni:.4f})")
    print("layer head  on BOS (pos 0)  on pos 1..3 (sum)")
    for L in range(att.shape[0]):
        for H in range(att.shape[1]):
            print(f"{L:5d} {H:4d}  {att[L, H, 0]:14.4f}  {att[L, H, 1]:11.4f}")
    print(f"all heads: on BOS {att[..., 0].mean():.4f}, on pos 1..3 (sum) {att[..., 1].mean():.4f}")


if __name__ == "__main__":
    main()
