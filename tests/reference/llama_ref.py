#!/usr/bin/python3
"""llama_ref.py: an independent numpy reference of the Metronome decoder.

Written from HuggingFace Llama semantics (modeling_llama.py), not from our
C code, so that tests/integration/reference.sh can check the C decoder
against it on the same safetensors file:

  * RMSNorm: x * rsqrt(mean(x^2) + eps) * weight
  * rotary: rotate_half, inv_freq = 1 / theta^(arange(0, d, 2) / d),
    q' = q cos + rotate_half(q) sin (cos/sin repeated over both halves)
  * GQA: kv heads repeated (repeat_kv), q head h uses kv head h // n_rep
  * attention: softmax(q k^T / sqrt(head_dim)) v, causal
  * MLP: down(silu(gate(x)) * up(x)); residual around both sublayers
  * Qwen2 (config model_type "qwen2", modeling_qwen2.py): q_proj, k_proj
    and v_proj carry biases (q = W_q x + b_q, ...), o_proj does not
  * Qwen3 (model_type "qwen3", modeling_qwen3.py): q and k reshaped to
    heads, each head RMSNorm'd over its head_dim with q_norm.weight /
    k_norm.weight [head_dim] (eps = rms_norm_eps) before the rotation;
    head_dim from the config; attention_bias true biases q, k, v and o
  * token adapter: embed_tokens lookup in, lm_head (or tied embedding) out
  * audio adapter: audio_in . (pcm / 32768) in, audio_out . norm(h) out,
    clamp to [-1, 1], round(y * 32767) to s16

Cache policies, computed from the whole history every step (no ring
buffer, no block table): each session keeps its un-rotated keys for every
position; a query at position p sees
  full:   positions 0..p, rotary position = the position;
  window: the sinks 0..S-1 and the last W positions (StreamingLLM), with
          rotary position = absolute position (rope absolute), or = index
          in the kept list, the query taking the last index (rope cache).

The safetensors file is read here with numpy (header JSON + raw bytes;
F32, F16, BF16). Everything is computed in float64.

Half precision (the C backend's --weights f16 and --kv-dtype f16), modelled
by rounding the same values to IEEE float16 (via float32, as the C side
rounds its fp32 values, round to nearest even) where the C side stores them:
  --weights f16:  every matrix the step multiplies by (q/k/v/o, gate, up,
                  down, lm_head, audio_in, audio_out); norms and the
                  embedding lookup stay as loaded.
  --kv-dtype f16: each position's K (rotated by its absolute position, as
                  the C cache keeps it) and V once stored; the query's own
                  position is attended to unrounded (the C step reads it
                  from its fp32 projection, not from the cache).

Inputs (the test spec shared with tests/helpers/mt-refdump.c): sessions b
= 0..len(starts)-1; at step t every session with starts[b] <= t is stepped
at its position i = t - starts[b], all of them as one batch, in order of b.
  token input:  id = (b * 7919 + i * 104729 + 13) % vocab
  audio input:  pcm[k] = ((b * 131 + i * 17 + k * 7) % 2001 - 1000) * 8
  positions (--pos-stride K): the input's rotary position is 3 * b + K * i
                (as an adapter's position ids would number it; without
                the option, i itself); keys rotated by their input's
                position, the query by its own (full, or rope absolute).
Output: for each step, for each stepped session, its logits (float32,
vocab) or its output pcm (int16, frame_samples), appended in that order.

Usage:
  llama_ref.py MODEL_DIR --policy full|window --sink S --window W
               --rope cache|absolute --starts 0,5,11 --steps 60
               [--input tokens|audio] [--kv-dtype f32|f16] [--weights f32|f16]
               [--drop bias|qknorm] [--pos-stride K] --out FILE [--check C_FILE] [--tol 1e-4]
--drop bias|qknorm computes the reference without the q/k/v biases or the
q/k norms (negative controls: a C decoder that skipped them).
With --check the reference compares C_FILE against its own result, prints
max_err, scale and rel, and exits 1 when rel >= tol (audio: max |diff| in
LSB, fails above 1).
"""
import argparse
import json
import os
import struct
import sys

import numpy as np


def to_f16(a):
    """a rounded to float16 as the C side does (float32 first), as float64."""
    return np.asarray(a).astype(np.float32).astype(np.float16).astype(np.float64)


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen].decode("utf-8"))
    data = raw[8 + hlen:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        buf = data[a:b]
        shape = tuple(info["shape"])
        dt = info["dtype"]
        if dt == "F32":
            arr = np.frombuffer(buf, dtype="<f4")
        elif dt == "F16":
            arr = np.frombuffer(buf, dtype="<f2")
        elif dt == "BF16":
            u16 = np.frombuffer(buf, dtype="<u2").astype(np.uint32)
            arr = (u16 << 16).view(np.float32)
        else:
            raise SystemExit("llama_ref: %s: unsupported dtype %s" % (name, dt))
        tensors[name] = arr.astype(np.float64).reshape(shape)
    return tensors


MATRICES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class Llama:
    def __init__(self, model_dir, weights="f32", kv_dtype="f32", drop=None):
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
        self.t = read_safetensors(os.path.join(model_dir, "model.safetensors"))
        self.kv_f16 = kv_dtype == "f16"
        self.hidden = cfg["hidden_size"]
        self.layers = cfg["num_hidden_layers"]
        self.heads = cfg["num_attention_heads"]
        self.kv_heads = cfg.get("num_key_value_heads", self.heads)
        self.head_dim = cfg.get("head_dim") or self.hidden // self.heads
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.theta = cfg.get("rope_theta", 10000.0)
        self.vocab = cfg.get("vocab_size", 0)
        self.frame_samples = cfg.get("frame_samples", 1920)
        mtype = cfg.get("model_type", "llama")
        if mtype not in ("llama", "qwen2", "qwen3"):
            raise SystemExit("llama_ref: model_type %s not described here" % mtype)
        # which projections carry a bias, and whether q/k are head-normed
        if mtype == "qwen2":
            self.biased = ("q_proj", "k_proj", "v_proj")
        elif cfg.get("attention_bias", False):
            self.biased = ("q_proj", "k_proj", "v_proj", "o_proj")
        else:
            self.biased = ()
        self.qk_norm = mtype == "qwen3"
        if drop == "bias":
            self.biased = ()
        elif drop == "qknorm":
            self.qk_norm = False
        t = self.t
        self.embed = t.get("model.embed_tokens.weight")
        self.lm_head = t.get("lm_head.weight")
        if self.lm_head is None and cfg.get("tie_word_embeddings", False):
            self.lm_head = self.embed
        self.audio_in = t.get("audio_in.weight")
        self.audio_out = t.get("audio_out.weight")
        if weights == "f16":
            for name in list(t):
                if name.endswith(".weight") and name.split(".")[-2] in MATRICES:
                    t[name] = to_f16(t[name])
            if self.lm_head is not None:
                self.lm_head = to_f16(self.lm_head)   # a copy: embed stays
            if self.audio_in is not None:
                self.audio_in = to_f16(self.audio_in)
            if self.audio_out is not None:
                self.audio_out = to_f16(self.audio_out)
        d = self.head_dim
        self.inv_freq = 1.0 / (self.theta ** (np.arange(0, d, 2, dtype=np.float64) / d))

    def w(self, l, name):
        return self.t["model.layers.%d.%s.weight" % (l, name)]

    def proj(self, l, name, x):
        """the projection self_attn.NAME of x, with its bias when it has one"""
        y = self.w(l, "self_attn." + name) @ x
        if name in self.biased:
            y = y + self.t["model.layers.%d.self_attn.%s.bias" % (l, name)]
        return y

    def head_norm(self, l, name, x):
        """Qwen3: x [n, head_dim], each head RMSNorm'd with NAME.weight"""
        if not self.qk_norm:
            return x
        return self.rmsnorm(x, self.w(l, "self_attn." + name))

    def rmsnorm(self, x, weight):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * weight

    def rope(self, x, pos):
        """x [n, head_dim] rotated by positions pos [n] (rotate_half)."""
        ang = np.outer(np.asarray(pos, dtype=np.float64), self.inv_freq)
        emb = np.concatenate([ang, ang], axis=-1)
        half = x.shape[-1] // 2
        rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        return x * np.cos(emb) + rot * np.sin(emb)


def kept(policy, S, W, p):
    """Positions a query at p attends to, oldest first."""
    if policy == "full":
        return list(range(p + 1))
    sinks = list(range(min(S, p + 1)))
    ring = list(range(max(S, p + 1 - W), p + 1))
    return sinks + ring


class Session:
    def __init__(self, m):
        # per layer: un-rotated keys and values of every position so far,
        # as the cache holds them (kv f16: rounded) and as computed (for
        # the query's own position)
        self.k = [[] for _ in range(m.layers)]
        self.v = [[] for _ in range(m.layers)]
        self.k_new = [None] * m.layers
        self.v_new = [None] * m.layers
        self.len = 0
        self.rpos = []   # rotary position of each position so far


def step(m, sess, x, policy, S, W, rope_mode, rp=None):
    """One position of one session: x [hidden] -> final hidden [hidden];
    rp: its rotary position when the input gives one."""
    p = sess.len
    sess.rpos.append(p if rp is None else rp)
    if rp is not None and policy == "window" and rope_mode == "cache":
        raise SystemExit("llama_ref: positions need rope absolute or the full policy")
    hd, nh, nkv = m.head_dim, m.heads, m.kv_heads
    n_rep = nh // nkv
    vis = kept(policy, S, W, p)
    if policy == "window" and rope_mode == "cache":
        key_pos = list(range(len(vis)))
        q_pos = len(vis) - 1
    else:
        key_pos = [sess.rpos[j] for j in vis]
        q_pos = sess.rpos[p]
    for l in range(m.layers):
        h = m.rmsnorm(x, m.w(l, "input_layernorm"))
        q = m.head_norm(l, "q_norm", m.proj(l, "q_proj", h).reshape(nh, hd))
        k = m.head_norm(l, "k_norm", m.proj(l, "k_proj", h).reshape(nkv, hd))
        v = m.proj(l, "v_proj", h).reshape(nkv, hd)
        if m.kv_f16:
            # the cache rounds the key rotated by its absolute position;
            # un-rotate the rounded key so that it is kept like the others
            kc = m.rope(to_f16(m.rope(k, [sess.rpos[p]] * nkv)), [-sess.rpos[p]] * nkv)
            sess.k[l].append(kc)
            sess.v[l].append(to_f16(v))
        else:
            sess.k[l].append(k)
            sess.v[l].append(v)
        K = np.stack([sess.k[l][j] if j != p else k for j in vis])  # [n, nkv, hd]
        V = np.stack([sess.v[l][j] if j != p else v for j in vis])
        out = np.zeros((nh, hd))
        for hq in range(nh):
            g = hq // n_rep
            qr = m.rope(q[hq][None, :], [q_pos])[0]
            kr = m.rope(K[:, g, :], key_pos)
            s = kr @ qr / np.sqrt(hd)
            s = np.exp(s - s.max())
            s /= s.sum()
            out[hq] = s @ V[:, g, :]
        x = x + m.proj(l, "o_proj", out.reshape(-1))
        h = m.rmsnorm(x, m.w(l, "post_attention_layernorm"))
        gate = m.w(l, "mlp.gate_proj") @ h
        up = m.w(l, "mlp.up_proj") @ h
        x = x + m.w(l, "mlp.down_proj") @ (gate / (1.0 + np.exp(-gate)) * up)
    sess.len += 1
    return m.rmsnorm(x, m.t["model.norm.weight"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--policy", choices=["full", "window"], required=True)
    ap.add_argument("--sink", type=int, default=4)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--rope", choices=["cache", "absolute"], default="cache")
    ap.add_argument("--starts", required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--input", choices=["tokens", "audio"], default="tokens")
    ap.add_argument("--out", required=True)
    ap.add_argument("--check")
    ap.add_argument("--kv-dtype", choices=["f32", "f16"], default="f32")
    ap.add_argument("--weights", choices=["f32", "f16"], default="f32")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--drop", choices=["bias", "qknorm"])
    ap.add_argument("--pos-stride", type=int)
    a = ap.parse_args()

    m = Llama(a.model_dir, weights=a.weights, kv_dtype=a.kv_dtype, drop=a.drop)
    starts = [int(s) for s in a.starts.split(",")]
    sessions = [Session(m) for _ in starts]
    outs = []
    for t in range(a.steps):
        for b, st in enumerate(starts):
            if t < st:
                continue
            i = t - st
            if a.input == "tokens":
                tok = (b * 7919 + i * 104729 + 13) % m.vocab
                x = m.embed[tok].copy()
            else:
                k = np.arange(m.frame_samples)
                pcm = ((b * 131 + i * 17 + k * 7) % 2001 - 1000) * 8
                x = m.audio_in @ (pcm / 32768.0)
            rp = None if a.pos_stride is None else 3 * b + a.pos_stride * i
            hf = step(m, sessions[b], x, a.policy, a.sink, a.window, a.rope, rp)
            if a.input == "tokens":
                outs.append((m.lm_head @ hf).astype(np.float32))
            else:
                y = np.clip(m.audio_out @ hf, -1.0, 1.0)
                outs.append(np.rint(y * 32767.0).astype(np.int16))
    ref = np.concatenate(outs)
    ref.tofile(a.out)
    if not a.check:
        return 0
    got = np.fromfile(a.check, dtype=ref.dtype)
    if got.shape != ref.shape:
        print("size mismatch: C %d values, reference %d" % (got.size, ref.size))
        return 1
    if a.input == "tokens":
        err = float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64))))
        scale = float(np.max(np.abs(ref)))
        rel = err / scale if scale > 0 else err
        bad = not np.all(np.isfinite(got)) or rel >= a.tol
        print("max_err=%.3e scale=%.3e rel=%.3e values=%d" % (err, scale, rel, ref.size))
    else:
        err = int(np.max(np.abs(got.astype(np.int32) - ref.astype(np.int32))))
        print("max_err_lsb=%d values=%d" % (err, ref.size))
        bad = err > 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
