"""A dependency-free check of the weight dump and of the model's conventions that
torch_decode.py relies on: reads a dump (decode_bench --dump-weights DIR) with the standard
library only, runs its prompt through a plain f64 Llama written in torch_decode.py's structure
(the same slicing of the fused projections, half-split RoPE, query head h on key/value head
h // group, residual order), and compares each prompt step's logits with decode_bench's
(--dump-logits FILE). Meant for the tiny model in f32, where the two agree to ~1e-5 of the
largest logit; a wrong convention shows as differences of order one.

    python3 reference_check.py DIR LOGITS [--tolerance 1e-4]
"""

import argparse
import json
import math
import os
import struct
import sys


def load(directory):
    with open(os.path.join(directory, "model.json")) as f:
        header = json.load(f)
    with open(os.path.join(directory, header["data"]), "rb") as f:
        data = f.read()
    tensors = {}
    for t in header["tensors"]:
        raw = data[t["offset"] : t["offset"] + t["bytes"]]
        if header["dtype"] == "f32":
            values = list(struct.unpack(f"<{len(raw) // 4}f", raw))
        elif header["dtype"] == "bf16":
            bits = struct.unpack(f"<{len(raw) // 2}H", raw)
            values = list(struct.unpack(f"<{len(bits)}f", struct.pack(f"<{len(bits)}I", *(b << 16 for b in bits))))
        else:
            raise SystemExit(f"unknown dtype {header['dtype']}")
        shape = t["shape"]
        if len(shape) == 2:
            rows, cols = shape
            values = [values[r * cols : (r + 1) * cols] for r in range(rows)]
        tensors[t["name"]] = values
    return header, tensors


def matvec(w, x):
    return [sum(a * b for a, b in zip(row, x)) for row in w]


def rmsnorm(x, w, eps):
    inv = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + eps)
    return [wi * xi * inv for wi, xi in zip(w, x)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dump")
    ap.add_argument("logits")
    ap.add_argument("--tolerance", type=float, default=1e-4)
    args = ap.parse_args()
    header, w = load(args.dump)
    c = header["config"]
    hidden, heads, kvh, hd = c["hidden"], c["heads"], c["kv_heads"], c["head_dim"]
    inter, eps, theta = c["intermediate"], c["rms_eps"], c["rope_theta"]
    q_dim, kv_dim, group, half = heads * hd, kvh * hd, heads // kvh, hd // 2
    vocab = c["vocab"]
    prompt = header["prompt"]
    with open(args.logits, "rb") as f:
        raw = f.read()
    theirs = struct.unpack(f"<{len(raw) // 4}f", raw)
    if len(theirs) != len(prompt) * vocab:
        raise SystemExit(f"{args.logits}: {len(theirs)} logits, expected {len(prompt)} x {vocab}")

    def rope(x, pos):
        out = list(x)
        for i in range(half):
            angle = pos * theta ** (-2.0 * i / hd)
            co, si = math.cos(angle), math.sin(angle)
            a, b = x[i], x[i + half]
            out[i], out[i + half] = a * co - b * si, b * co + a * si
        return out

    keys = [[] for _ in range(c["layers"])]
    values = [[] for _ in range(c["layers"])]
    worst, scale = 0.0, 0.0
    same = 0
    for pos, token in enumerate(prompt):
        x = list(w["embed"][token])
        for l in range(c["layers"]):
            p = f"layers.{l}."
            h = rmsnorm(x, w[p + "attn_norm"], eps)
            qkv = matvec(w[p + "qkv"], h)
            q = [rope(qkv[i * hd : (i + 1) * hd], pos) for i in range(heads)]
            k = [rope(qkv[q_dim + i * hd : q_dim + (i + 1) * hd], pos) for i in range(kvh)]
            v = [qkv[q_dim + kv_dim + i * hd : q_dim + kv_dim + (i + 1) * hd] for i in range(kvh)]
            keys[l].append(k)
            values[l].append(v)
            attn = []
            for hh in range(heads):
                g = hh // group
                scores = [sum(a * b for a, b in zip(q[hh], keys[l][t][g])) / math.sqrt(hd) for t in range(pos + 1)]
                m = max(scores)
                e = [math.exp(s - m) for s in scores]
                total = sum(e)
                attn.extend(sum(e[t] * values[l][t][g][d] for t in range(pos + 1)) / total for d in range(hd))
            x = [a + b for a, b in zip(x, matvec(w[p + "out"], attn))]
            h = rmsnorm(x, w[p + "mlp_norm"], eps)
            gu = matvec(w[p + "gate_up"], h)
            act = [gate / (1.0 + math.exp(-gate)) * up for gate, up in zip(gu[:inter], gu[inter:])]
            x = [a + b for a, b in zip(x, matvec(w[p + "down"], act))]
        logits = matvec(w["lm_head"], rmsnorm(x, w["final_norm"], eps))
        row = theirs[pos * vocab : (pos + 1) * vocab]
        worst = max(worst, max(abs(a - b) for a, b in zip(logits, row)))
        scale = max(scale, max(abs(b) for b in row))
        same += logits.index(max(logits)) == list(row).index(max(row))
    relative = worst / max(scale, 1e-30)
    ok = relative <= args.tolerance
    print(
        f"reference_check steps={len(prompt)} max_abs_diff={worst:.3g} max_abs_logit={scale:.3g} "
        f"relative={relative:.3g} same_argmax={same}/{len(prompt)} {'ok' if ok else 'FAILED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
