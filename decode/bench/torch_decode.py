"""PyTorch's side of decode_bench: the same Llama decode step, from the same weights (a dump
written by `decode_bench --dump-weights DIR`), written as PyTorch users write a fast decode
step (gpt-fast / vLLM style), timed and printed in decode_bench's line format with impl=torch.

The model, in the Rust model's structure and rounding (decode/src/model/):

* RMSNorm as Hugging Face's LlamaRMSNorm: f32 sum of squares, x * rsqrt(mean + eps) rounded to
  the model's dtype, times the weight;
* the fused QKV projection (query rows, key rows, value rows), RoPE on q and k in f32 with
  Hugging Face's half-split pairs (element i with element i + head_dim/2, rotate_half), angle
  position * theta^(-2i/head_dim) computed in f64 and rounded to f32 — decode_rope_kv's table;
* a static key/value cache per layer, [slots, kv_heads, max_len, head_dim] as the Rust cache,
  row r of a step in slot r (gpt-fast's layout), written at each row's position (index_put_);
* attention by F.scaled_dot_product_attention (scale 1/sqrt(head_dim)) over the whole cache
  with an additive mask built from the per-row lengths, so one graph serves every step;
  grouped-query attention folded into the query length by default (the `group` query heads of
  a key/value head attend as `group` query positions: no copy of the cache), or
  repeat_interleave (gpt-fast) or enable_gqa=True (--gqa);
* the output and down projections with the residual in the GEMM (torch.addmm: beta = 1, as
  the Rust GEMM's epilogue adds it, rounded once); SwiGLU as silu(gate) * up;
* the final norm, the LM head, greedy argmax on the device.

GEMMs with f32 accumulation and no reduced-precision reductions (the Rust backend's cuBLAS
settings): allow_tf32 = False, allow_bf16_reduced_precision_reduction = False.

Graphs: one torch.cuda.CUDAGraph per batch bucket, all captured into one pool
(torch.cuda.graph_pool_handle()), largest first, each after one eager warm-up on the capture
stream; static inputs (token ids, positions, lengths: one int64 [3, batch] tensor) copied in
from pinned host memory before each replay, the next tokens read back after it.

Phases (each a fresh model state; weights loaded once):

  startup  buckets 1, 2, 4, then every 8 up to --startup-max-batch (35 for 256), a cache of
           that many sequences; after one eager step, all captured: time, reserved bytes and
           the device's used bytes (cudaMemGetInfo) before and after, the pool's bytes.
  bench    per mode (graph, eager) the cache of every sequence filled with --context random
           positions, then per batch --warmup + --steps (--eager-steps) timed steps at position
           --context, each timed as a serving loop sees it: inputs copied in, replay (or eager
           forward), next tokens read back.
  tokens   the dump's prompt fed token by token at batch 1, then --tokens greedy tokens;
           --check FILE compares the logits of every prompt step with decode_bench's
           (--dump-logits FILE) and prints the largest difference.

    python3 torch_decode.py --weights DIR [--context 512] [--max-len 576] [--phases ...]
"""

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
FORMAT = "accel-graph-decode-weights"


def load(directory, device):
    """The dump's header and its tensors on `device`, by name."""
    with open(os.path.join(directory, "model.json")) as f:
        header = json.load(f)
    if header.get("format") != FORMAT or header.get("version") != 1:
        raise SystemExit(f"{directory}: not a version-1 {FORMAT} dump")
    dtype = DTYPES[header["dtype"]]
    path = os.path.join(directory, header["data"])
    size = os.path.getsize(path)
    if size < header["data_bytes"]:
        raise SystemExit(f"{path}: {size} bytes, the header says {header['data_bytes']}")
    data = torch.from_file(path, shared=False, size=size, dtype=torch.uint8)
    tensors = {}
    for t in header["tensors"]:
        raw = data[t["offset"] : t["offset"] + t["bytes"]]
        tensors[t["name"]] = raw.view(dtype).view(t["shape"]).to(device)
    del data
    return header, dtype, tensors


def max_len_for(args, prompt_len):
    needed = max(args.context + 1, prompt_len + max(args.tokens, 1) - 1)
    if args.max_len is None:
        return (needed + 63) // 64 * 64
    if args.max_len < needed:
        raise SystemExit(f"--max-len {args.max_len} is below the {needed} positions needed")
    return args.max_len


def startup_sizes(largest):
    return [s for s in (1, 2, 4) if s <= largest] + list(range(8, largest + 1, 8))


def quantile(v, q):
    """The q-quantile of sorted v by linear interpolation (as decode_bench computes it)."""
    at = (len(v) - 1) * q
    lo, hi = math.floor(at), math.ceil(at)
    return v[lo] + (v[hi] - v[lo]) * (at - lo)


class Decoder:
    """The model with a static key/value cache of `slots` sequences of `max_len` positions."""

    def __init__(self, header, dtype, weights, max_len, slots, device, gqa):
        c = header["config"]
        self.dtype, self.device, self.gqa = dtype, device, gqa
        self.vocab, self.hidden, self.layers = c["vocab"], c["hidden"], c["layers"]
        self.heads, self.kv_heads, self.head_dim = c["heads"], c["kv_heads"], c["head_dim"]
        self.inter, self.eps = c["intermediate"], float(c["rms_eps"])
        self.q_dim = self.heads * self.head_dim
        self.kv_dim = self.kv_heads * self.head_dim
        self.group = self.heads // self.kv_heads
        self.max_len, self.slots = max_len, slots
        self.embed = weights["embed"]
        self.final_norm = weights["final_norm"]
        self.lm_head = weights["lm_head"]
        names = ("attn_norm", "qkv", "out", "mlp_norm", "gate_up", "down")
        self.w = [{n: weights[f"layers.{l}.{n}"] for n in names} for l in range(self.layers)]
        # RoPE table as decode_rope_kv's: angles in f64, cos and sin rounded to f32.
        half = self.head_dim // 2
        theta = float(c["rope_theta"])
        inv = torch.tensor([theta ** (-2.0 * i / self.head_dim) for i in range(half)], dtype=torch.float64)
        angles = torch.arange(max_len, dtype=torch.float64)[:, None] * inv[None, :]
        self.cos = angles.cos().float().to(device)
        self.sin = angles.sin().float().to(device)
        shape = (self.layers, slots, self.kv_heads, max_len, self.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.rows = torch.arange(slots, device=device)
        self.cache_positions = torch.arange(max_len, device=device)

    def cache_bytes(self):
        return 2 * self.k.numel() * self.k.element_size()

    def rmsnorm(self, x, w):
        xf = x.float()
        return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)

    def rope(self, x, cos, sin):
        half = self.head_dim // 2
        xf = x.float()
        a, b = xf[..., :half], xf[..., half:]
        return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1).to(self.dtype)

    def attend(self, q, kc, vc, mask):
        b = q.shape[0]
        if self.gqa == "fold":
            o = F.scaled_dot_product_attention(q.view(b, self.kv_heads, self.group, self.head_dim), kc, vc, attn_mask=mask)
        elif self.gqa == "repeat":
            o = F.scaled_dot_product_attention(
                q.view(b, self.heads, 1, self.head_dim),
                kc.repeat_interleave(self.group, dim=1),
                vc.repeat_interleave(self.group, dim=1),
                attn_mask=mask,
            )
        else:
            o = F.scaled_dot_product_attention(q.view(b, self.heads, 1, self.head_dim), kc, vc, attn_mask=mask, enable_gqa=True)
        return o.reshape(b, self.q_dim)

    def residual_linear(self, x, a, w):
        """x + a · wᵀ, the residual added in the GEMM (torch_tp_decode.py's ranks add the
        all-reduce here)."""
        return torch.addmm(x, a, w.t())

    def forward(self, inp):
        """One decode step of rows 0..b (row r in cache slot r); `inp` is int64 [3, b]: token
        ids, positions, lengths (attended positions; 0 for a padding row). Returns the logits
        and the greedy next tokens."""
        tokens, pos, lens = inp[0], inp[1], inp[2]
        b = tokens.shape[0]
        x = F.embedding(tokens, self.embed)
        cos, sin = self.cos[pos].unsqueeze(1), self.sin[pos].unsqueeze(1)
        keep = self.cache_positions[None, :] < lens.clamp(min=1)[:, None]
        mask = torch.full((b, self.max_len), float("-inf"), dtype=self.dtype, device=self.device)
        mask = mask.masked_fill_(keep, 0.0).view(b, 1, 1, self.max_len)
        rows = self.rows[:b]
        q_end, k_end = self.q_dim, self.q_dim + self.kv_dim
        for l, w in enumerate(self.w):
            h = self.rmsnorm(x, w["attn_norm"])
            qkv = F.linear(h, w["qkv"])
            q = self.rope(qkv[:, :q_end].view(b, self.heads, self.head_dim), cos, sin)
            k = self.rope(qkv[:, q_end:k_end].view(b, self.kv_heads, self.head_dim), cos, sin)
            v = qkv[:, k_end:].view(b, self.kv_heads, self.head_dim)
            kc, vc = self.k[l], self.v[l]
            kc[rows, :, pos] = k
            vc[rows, :, pos] = v
            a = self.attend(q, kc[:b], vc[:b], mask)
            x = self.residual_linear(x, a, w["out"])
            h = self.rmsnorm(x, w["mlp_norm"])
            gu = F.linear(h, w["gate_up"])
            act = F.silu(gu[:, : self.inter]) * gu[:, self.inter :]
            x = self.residual_linear(x, act, w["down"])
        h = self.rmsnorm(x, self.final_norm)
        logits = F.linear(h, self.lm_head)
        return logits, logits.argmax(dim=-1)


class Bucket:
    """A batch size's static inputs and, graphed, its CUDA graph and static outputs."""

    def __init__(self, model, batch, pool=None, stream=None):
        self.model, self.batch = model, batch
        self.inp = torch.zeros((3, batch), dtype=torch.int64, device=model.device)
        self.host = torch.zeros((3, batch), dtype=torch.int64).pin_memory()
        self.graph = None
        if pool is not None:
            # One eager warm-up of padding rows on the capture stream, then the capture.
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                model.forward(self.inp)
                g = torch.cuda.CUDAGraph()
                g.capture_begin(pool=pool)
                self.logits, self.next = model.forward(self.inp)
                g.capture_end()
            torch.cuda.current_stream().wait_stream(stream)
            self.graph = g

    def step(self):
        """One step from self.host's inputs: copy in, replay (or run eagerly), read back."""
        self.inp.copy_(self.host, non_blocking=True)
        if self.graph is not None:
            self.graph.replay()
            nxt = self.next
        else:
            self.logits, nxt = self.model.forward(self.inp)
        return nxt.cpu()


def capture_all(model, sizes):
    pool = torch.cuda.graph_pool_handle()
    stream = torch.cuda.Stream()
    buckets = {b: Bucket(model, b, pool, stream) for b in sorted(set(sizes), reverse=True)}
    return buckets, pool


def pool_reserved_bytes(pool):
    pool = tuple(pool)
    return sum(seg["total_size"] for seg in torch.cuda.memory_snapshot() if tuple(seg.get("segment_pool_id", (0, 0))) == pool)


def device_used():
    free, total = torch.cuda.mem_get_info()
    return total - free


def warm_up(model):
    """One eager step of one padding row: cuBLAS's handle and workspace, the kernels loaded."""
    Bucket(model, 1).step()
    torch.cuda.synchronize()


class Run:
    def __init__(self, args):
        self.args = args
        self.device = torch.device("cuda")
        t0 = time.perf_counter()
        self.header, self.dtype, self.weights = load(args.weights, self.device)
        torch.cuda.synchronize()
        c = self.header["config"]
        self.name = self.header.get("preset") or "dump"
        self.dname = self.header["dtype"]
        self.prompt = self.header["prompt"]
        if not self.prompt:
            raise SystemExit("the dump has no prompt")
        self.max_len = max_len_for(args, len(self.prompt))
        params = sum(t.numel() for t in self.weights.values())
        print(
            f"model impl=torch config={self.name} dtype={self.dname} params={params} "
            f"weight_bytes={params * self.weights['embed'].element_size()} layers={c['layers']} "
            f"hidden={c['hidden']} heads={c['heads']} kv_heads={c['kv_heads']} head_dim={c['head_dim']} "
            f"intermediate={c['intermediate']} vocab={c['vocab']} max_len={self.max_len} "
            f"gqa={args.gqa} torch={torch.__version__} cuda={torch.version.cuda} "
            f"device={torch.cuda.get_device_name().replace(' ', '_')} load_seconds={time.perf_counter() - t0:.3f}",
            flush=True,
        )

    def decoder(self, slots):
        return Decoder(self.header, self.dtype, self.weights, self.max_len, slots, self.device, self.args.gqa)

    def startup(self):
        sizes = startup_sizes(self.args.startup_max_batch)
        model = self.decoder(max(sizes))
        warm_up(model)
        torch.cuda.synchronize()
        reserved_before, used_before = torch.cuda.memory_reserved(), device_used()
        t0 = time.perf_counter()
        buckets, pool = capture_all(model, sizes)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        reserved_after, used_after = torch.cuda.memory_reserved(), device_used()
        print(
            f"startup impl=torch config={self.name} dtype={self.dname} graphs={len(buckets)} sizes={len(sizes)} "
            f"max_batch={max(sizes)} max_len={self.max_len} seconds={seconds:.4f} "
            f"pool_bytes={pool_reserved_bytes(pool)} cache_bytes={model.cache_bytes()} "
            f"reserved_before={reserved_before} reserved_after={reserved_after} "
            f"device_used_before={used_before} device_used_after={used_after}",
            flush=True,
        )
        del buckets, model

    def bench(self, mode):
        args = self.args
        batches = sorted(set(args.batches))
        largest = batches[-1]
        model = self.decoder(largest)
        t0 = time.perf_counter()
        # The cache holds --context positions of every sequence (random values: what they are
        # does not change the work).
        gen = torch.Generator(device=self.device).manual_seed(1)
        model.k[:, :, :, : args.context].normal_(generator=gen)
        model.v[:, :, :, : args.context].normal_(generator=gen)
        torch.cuda.synchronize()
        print(f"phase impl=torch config={self.name} name=fill_{mode} context={args.context} batch={largest} seconds={time.perf_counter() - t0:.3f}", flush=True)
        if mode == "graph":
            buckets, _ = capture_all(model, batches)
        else:
            buckets = {b: Bucket(model, b) for b in batches}
        steps = args.steps if mode == "graph" else args.eager_steps
        for b in batches:
            bucket = buckets[b]
            bucket.host[0].copy_(torch.randint(0, model.vocab, (b,), generator=torch.Generator().manual_seed(b)))
            bucket.host[1].fill_(args.context)
            bucket.host[2].fill_(args.context + 1)
            times = []
            for i in range(args.warmup + steps):
                t = time.perf_counter()
                nxt = bucket.step()
                took = time.perf_counter() - t
                if i >= args.warmup:
                    times.append(took * 1e6)
                bucket.host[0].copy_(nxt)
            times.sort()
            print(
                f"bench impl=torch mode={mode} config={self.name} dtype={self.dname} batch={b} context={args.context} "
                f"steps={steps} median_us={quantile(times, 0.5):.1f} p10_us={quantile(times, 0.1):.1f} "
                f"p90_us={quantile(times, 0.9):.1f} mean_us={sum(times) / len(times):.1f} min_us={times[0]:.1f}",
                flush=True,
            )
        del buckets, model

    def tokens(self):
        args = self.args
        model = self.decoder(1)
        buckets, _ = capture_all(model, [1])
        bucket = buckets[1]
        p = len(self.prompt)
        logits, generated, nxt = [], [], 0
        for pos in range(p + max(args.tokens, 1) - 1):
            token = self.prompt[pos] if pos < p else nxt
            bucket.host[0, 0], bucket.host[1, 0], bucket.host[2, 0] = token, pos, pos + 1
            nxt = int(bucket.step()[0])
            if pos < p:
                logits.append(bucket.logits[0].float().cpu())
            if pos + 1 >= p:
                generated.append(nxt)
        generated = generated[: args.tokens]
        print(
            f"tokens impl=torch config={self.name} dtype={self.dname} n={len(generated)} "
            f"prompt={','.join(map(str, self.prompt))} tokens={','.join(map(str, generated))}",
            flush=True,
        )
        if args.check:
            self.check(torch.stack(logits))
        del buckets, model

    def check(self, ours):
        """Max |difference| of every prompt step's logits against decode_bench's."""
        path = self.args.check
        if not os.path.exists(path):
            print(f"check impl=torch config={self.name} dtype={self.dname} error=missing_file file={path}", flush=True)
            return
        theirs = torch.from_file(path, shared=False, size=os.path.getsize(path) // 4, dtype=torch.float32)
        if theirs.numel() != ours.numel():
            print(f"check impl=torch config={self.name} dtype={self.dname} error=size_mismatch torch={ours.numel()} accel={theirs.numel()}", flush=True)
            return
        theirs = theirs.view_as(ours)
        diff = (ours - theirs).abs()
        per_step = diff.amax(dim=1)
        scale = theirs.abs().max().item()
        same_argmax = (ours.argmax(dim=1) == theirs.argmax(dim=1)).sum().item()
        print(
            f"check impl=torch config={self.name} dtype={self.dname} steps={ours.shape[0]} "
            f"max_abs_diff={diff.max().item():.6g} first_step_max_abs_diff={per_step[0].item():.6g} "
            f"max_abs_logit={scale:.6g} relative={diff.max().item() / max(scale, 1e-30):.3g} "
            f"same_argmax={same_argmax}/{ours.shape[0]} per_step={','.join(f'{d:.3g}' for d in per_step.tolist())}",
            flush=True,
        )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--weights", required=True, help="dump directory (decode_bench --dump-weights DIR)")
    ap.add_argument("--batches", default="1,2,4,8,16,32,64")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--max-len", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--eager-steps", type=int, default=100)
    ap.add_argument("--modes", default="graph,eager")
    ap.add_argument("--phases", default="startup,bench,tokens")
    ap.add_argument("--startup-max-batch", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--check", default=None, help="decode_bench --dump-logits FILE: compare the prompt steps' logits")
    ap.add_argument("--gqa", choices=("fold", "repeat", "enable"), default="fold")
    args = ap.parse_args()
    args.batches = [int(b) for b in args.batches.split(",") if b]
    if not args.batches or min(args.batches) < 1 or args.context < 1:
        raise SystemExit("--batches must be at least 1 each, --context at least 1")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    with torch.inference_mode():
        run = Run(args)
        for phase in args.phases.split(","):
            t0 = time.perf_counter()
            if phase == "startup":
                run.startup()
            elif phase == "bench":
                for mode in args.modes.split(","):
                    t1 = time.perf_counter()
                    run.bench(mode)
                    torch.cuda.synchronize()
                    torch.cuda.empty_cache()
                    print(f"phase impl=torch config={run.name} name=bench_{mode} seconds={time.perf_counter() - t1:.3f}", flush=True)
            elif phase == "tokens":
                run.tokens()
            else:
                raise SystemExit(f"unknown phase {phase!r}")
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            print(f"phase impl=torch config={run.name} name={phase} seconds={time.perf_counter() - t0:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
