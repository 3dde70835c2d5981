#!/usr/bin/python3
"""Train Metronome's small token model (issue 9): a byte-level Llama.

A build-time tool, not a runtime dependency. Uses Debian's python3-torch on
the CPU, one thread, fixed seed, so the same command on the same machine
reproduces the shipped weights (see tools/train/README.md for the command,
the corpus, its licence and the tolerance).

The model follows HuggingFace Llama semantics exactly (RMSNorm, rotate-half
rotary embedding, SwiGLU MLP, tied embeddings) so the C decoder loads it
through its token adapter with the same tensor names.

Corpus: the English fortune cookie files of Debian's `fortunes` package
(quotes, jokes and dialogue-like turns), cookies separated by a blank line.
Every training sequence starts with a BOS token (id 256): the model learns
to park attention on it, the "attention sink" that StreamingLLM keeps.
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

FORTUNE_DIR = "/usr/share/games/fortunes"
# ASCII art and the (tiny) non-prose files are left out.
SKIP = {"art", "ascii-art", "translate-me", "disclaimer"}
BOS = 256
VOCAB = 257


def load_corpus(d=FORTUNE_DIR):
    names = sorted(n for n in os.listdir(d)
                   if not n.endswith((".dat", ".u8")) and n not in SKIP
                   and os.path.isfile(os.path.join(d, n)))
    parts = []
    for n in names:
        with open(os.path.join(d, n), "rb") as f:
            raw = f.read()
        cookies = [c.strip(b"\n") for c in raw.split(b"\n%\n")]
        parts.extend(c for c in cookies if c and b"\x1b" not in c)
    text = b"\n\n".join(parts) + b"\n"
    # 7-bit only: the few Latin-1/UTF-8 bytes are rare and noisy.
    text = bytes(b if b < 128 else ord("?") for b in text)
    return names, text


def split(text, held_frac=0.05):
    n = int(len(text) * (1 - held_frac))
    return text[:n], text[n:]


class Llama(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        h, f, nh, nkv = c["hidden_size"], c["intermediate_size"], \
            c["num_attention_heads"], c["num_key_value_heads"]
        hd = h // nh
        self.hd = hd
        self.embed = torch.nn.Embedding(c["vocab_size"], h)
        self.layers = torch.nn.ModuleList()
        for _ in range(c["num_hidden_layers"]):
            L = torch.nn.Module()
            L.ln1 = torch.nn.Parameter(torch.ones(h))
            L.q = torch.nn.Linear(h, nh * hd, bias=False)
            L.k = torch.nn.Linear(h, nkv * hd, bias=False)
            L.v = torch.nn.Linear(h, nkv * hd, bias=False)
            L.o = torch.nn.Linear(nh * hd, h, bias=False)
            L.ln2 = torch.nn.Parameter(torch.ones(h))
            L.gate = torch.nn.Linear(h, f, bias=False)
            L.up = torch.nn.Linear(h, f, bias=False)
            L.down = torch.nn.Linear(f, h, bias=False)
            self.layers.append(L)
        self.norm = torch.nn.Parameter(torch.ones(h))
        for p in self.parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, std=c["initializer_range"])
        # GPT-2 style: residual projections scaled down by depth.
        for L in self.layers:
            torch.nn.init.normal_(L.o.weight, std=c["initializer_range"] /
                                  math.sqrt(2 * c["num_hidden_layers"]))
            torch.nn.init.normal_(L.down.weight, std=c["initializer_range"] /
                                  math.sqrt(2 * c["num_hidden_layers"]))

    def rms(self, x, w):
        eps = self.c["rms_norm_eps"]
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    def rope(self, x, pos):
        # x [B, H, T, hd]; HF rotate-half with inv_freq over even indices
        hd = self.hd
        inv = 1.0 / (self.c["rope_theta"] ** (torch.arange(0, hd, 2,
                                                              dtype=torch.float32) / hd))
        ang = pos[:, None].float() * inv[None, :]          # [T, hd/2]
        emb = torch.cat([ang, ang], -1)                     # [T, hd]
        cos, sin = emb.cos(), emb.sin()
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        rot = torch.cat([-x2, x1], -1)
        return x * cos + rot * sin

    def forward(self, ids):
        B, T = ids.shape
        c = self.c
        nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], self.hd
        x = self.embed(ids)
        pos = torch.arange(T)
        mask = torch.full((T, T), float("-inf")).triu(1)
        for L in self.layers:
            h = self.rms(x, L.ln1)
            q = L.q(h).view(B, T, nh, hd).transpose(1, 2)
            k = L.k(h).view(B, T, nkv, hd).transpose(1, 2)
            v = L.v(h).view(B, T, nkv, hd).transpose(1, 2)
            q, k = self.rope(q, pos), self.rope(k, pos)
            if nkv != nh:
                k = k.repeat_interleave(nh // nkv, 1)
                v = v.repeat_interleave(nh // nkv, 1)
            a = (q @ k.transpose(-1, -2)) / math.sqrt(hd) + mask
            a = a.softmax(-1) @ v
            x = x + L.o(a.transpose(1, 2).reshape(B, T, nh * hd))
            h = self.rms(x, L.ln2)
            x = x + L.down(F.silu(L.gate(h)) * L.up(h))
        x = self.rms(x, self.norm)
        return x @ self.embed.weight.T                      # tied lm_head

    def tensors(self):
        """HF names -> float32 numpy arrays (tied: no lm_head.weight)."""
        out = {"model.embed_tokens.weight": self.embed.weight,
               "model.norm.weight": self.norm}
        for i, L in enumerate(self.layers):
            p = f"model.layers.{i}."
            out[p + "input_layernorm.weight"] = L.ln1
            out[p + "self_attn.q_proj.weight"] = L.q.weight
            out[p + "self_attn.k_proj.weight"] = L.k.weight
            out[p + "self_attn.v_proj.weight"] = L.v.weight
            out[p + "self_attn.o_proj.weight"] = L.o.weight
            out[p + "post_attention_layernorm.weight"] = L.ln2
            out[p + "mlp.gate_proj.weight"] = L.gate.weight
            out[p + "mlp.up_proj.weight"] = L.up.weight
            out[p + "mlp.down_proj.weight"] = L.down.weight
        return {k: v.detach().float().numpy() for k, v in out.items()}


def save_safetensors(path, tensors):
    header, off, blobs = {}, 0, []
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype="<f4")
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


def windows(data, T):
    """Non-overlapping evaluation chunks of T bytes, each read after BOS."""
    for i in range(len(data) // T):
        chunk = data[i * T:(i + 1) * T]
        yield torch.tensor([BOS] + list(chunk[:-1])), torch.tensor(list(chunk))


@torch.no_grad()
def evaluate(model, data, T, limit=None):
    """Mean NLL (nats/byte) over held-out text, full cache within T."""
    tot, cnt = 0.0, 0
    for i, (x, y) in enumerate(windows(data, T)):
        if limit and i >= limit:
            break
        logits = model(x[None])[0]
        tot += F.cross_entropy(logits, y, reduction="sum").item()
        cnt += len(y)
    return tot / cnt, cnt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="models/fortune-byte")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=1800)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=256, help="training context T")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=384)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    rng = np.random.default_rng(args.seed)

    names, text = load_corpus()
    train, held = split(text)
    print(f"corpus: {len(names)} files, {len(text)} bytes "
          f"(train {len(train)}, held-out {len(held)})", flush=True)

    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
           "hidden_size": args.hidden, "intermediate_size": args.ffn,
           "num_hidden_layers": args.layers,
           "num_attention_heads": args.heads,
           "num_key_value_heads": args.heads,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "vocab_size": VOCAB, "tie_word_embeddings": True,
           "max_position_embeddings": args.ctx,
           "initializer_range": 0.02, "bos_token_id": BOS,
           "torch_dtype": "float32"}
    model = Llama(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr,
                            betas=(0.9, 0.95), weight_decay=0.1)
    T, data = args.ctx, np.frombuffer(train, dtype=np.uint8)
    t0 = time.time()
    for step in range(args.steps):
        lr = args.lr * min(1.0, (step + 1) / 100) * \
            0.5 * (1 + math.cos(math.pi * step / args.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = rng.integers(0, len(data) - T, size=args.batch)
        seq = np.stack([data[s:s + T] for s in starts]).astype(np.int64)
        x = torch.cat([torch.full((args.batch, 1), BOS),
                       torch.from_numpy(seq[:, :-1])], 1)
        y = torch.from_numpy(seq)
        loss = F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == args.steps - 1:
            print(f"step {step} loss {loss.item():.4f} lr {lr:.2e} "
                  f"{time.time() - t0:.0f}s", flush=True)

    nll, n = evaluate(model, held, T)
    os.makedirs(args.out, exist_ok=True)
    save_safetensors(os.path.join(args.out, "model.safetensors"),
                     model.tensors())
    cfg_out = dict(cfg)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg_out, f, indent=2)
        f.write("\n")
    with open(os.path.join(args.out, "tokenizer.json"), "w") as f:
        json.dump({"type": "byte-level", "vocab_size": VOCAB,
                   "bytes": "token id = byte value 0..255",
                   "bos_token_id": BOS,
                   "text": "7-bit ASCII; bytes >= 128 were mapped to '?'"},
                  f, indent=2)
        f.write("\n")
    held_path = os.path.join(args.out, "heldout.txt")
    with open(held_path, "wb") as f:
        f.write(held)
    with open(os.path.join(args.out, "eval.json"), "w") as f:
        json.dump({"heldout_nll_nats_per_byte": nll,
                   "heldout_ppl": math.exp(nll), "heldout_bytes": n,
                   "eval": "non-overlapping chunks of T bytes, each read after BOS, "
                           "full cache within T", "ctx": T,
                   "seed": args.seed, "steps": args.steps,
                   "train_seconds": round(time.time() - t0)}, f, indent=2)
        f.write("\n")
    print(f"held-out: nll {nll:.4f} nats/byte, ppl {math.exp(nll):.4f} "
          f"over {n} bytes", flush=True)


if __name__ == "__main__":
    sys.exit(main())
