"""PyTorch's side of decode_tp: the decode step of torch_decode.py split over the GPUs of a
torchrun launch (one process per GPU, torch.distributed with NCCL) the way the Rust model
splits it, the all-reduces captured inside each bucket's torch.cuda.graph; timed and printed
in decode_tp's line format with impl=torch.

The split (Megatron style, decode/src/tp/partition.rs), rank r of world:

* query heads r*h .. (r+1)*h, h = heads / world: the rows of the fused QKV projection for them
  (column-parallel) and the columns of the output projection (row-parallel);
* key/value heads r*k .. (r+1)*k, k = kv_heads / world; with more ranks than key/value heads
  (world a multiple of kv_heads), head r // (world / kv_heads) — the one its query heads attend
  to — held by each of those ranks;
* MLP intermediate columns r*i .. (r+1)*i: the gate and up rows (column-parallel), the down
  projection's columns (row-parallel);
* embedding, norms and LM head whole on every rank (every rank samples the same token).

Each row-parallel product is followed by an all-reduce (sum) of the residual stream: rank 0
adds the residual in its GEMM (torch.addmm, as the one-GPU model), the other ranks contribute
their bare product (torch.mm). A configuration that does not split is refused.

Runs, one at a time: TP=1 (torch_decode.py's Decoder with the whole model, on rank 0's GPU
while the other ranks wait), then TP=world. Each: an engine of buckets --batches captured
into one pool (largest first), the caches filled with --context random positions, per batch
--warmup + --steps graphed steps timed as a serving loop sees them (inputs copied in, replay,
next tokens read back); then the dump's prompt fed token by token at batch 1 and --tokens
greedy tokens. Rank 0 prints `bench impl=torch mode=graph tp=N ...`, `tokens impl=torch tp=N
...` and a `compare` line: the split model's tokens and prompt logits against TP=1's, and
whether every rank sampled the same.

    torchrun --standalone --nproc-per-node 2 torch_tp_decode.py --weights DIR \\
        [--batches 1,8,32] [--context 512] [--max-len N] [--warmup 20] [--steps 200] [--tokens 32]
"""

import argparse
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

from torch_decode import Decoder, capture_all, load, max_len_for, quantile


def partition(c, world, rank):
    """Rank `rank`'s query heads, key/value heads and intermediate columns (ranges), or
    SystemExit for sizes that do not split (decode/src/tp/partition.rs's rules)."""
    heads, kv_heads, inter = c["heads"], c["kv_heads"], c["intermediate"]
    if heads % world:
        raise SystemExit(f"tensor parallelism over {world} ranks: heads ({heads}) is not a multiple of {world}")
    if kv_heads % world and world % kv_heads:
        raise SystemExit(f"tensor parallelism over {world} ranks: kv_heads ({kv_heads}) is neither a multiple nor a divisor of {world}")
    if inter % world:
        raise SystemExit(f"tensor parallelism over {world} ranks: intermediate ({inter}) is not a multiple of {world}")
    h, i = heads // world, inter // world
    k = max(kv_heads // world, 1)
    replicas = max(world // kv_heads, 1)
    first_kv = rank // replicas * k
    return range(rank * h, (rank + 1) * h), range(first_kv, first_kv + k), range(rank * i, (rank + 1) * i)


def split_weights(header, weights, world, rank):
    """The header of this rank's model (its sizes) and its part of every tensor."""
    c = header["config"]
    q, kv, inter = partition(c, world, rank)
    d = c["head_dim"]
    q_dim, kv_dim, full_inter = c["heads"] * d, c["kv_heads"] * d, c["intermediate"]
    local = dict(header)
    local["config"] = dict(c, heads=len(q), kv_heads=len(kv), intermediate=len(inter))
    rows = lambda r, by, at=0: slice(at + r.start * by, at + r.stop * by)
    out = {}
    for name, t in weights.items():
        kind = name.rsplit(".", 1)[-1]
        if kind == "qkv":
            t = torch.cat((t[rows(q, d)], t[rows(kv, d, q_dim)], t[rows(kv, d, q_dim + kv_dim)]))
        elif kind == "out":
            t = t[:, rows(q, d)]
        elif kind == "gate_up":
            t = torch.cat((t[rows(inter, 1)], t[rows(inter, 1, full_inter)]))
        elif kind == "down":
            t = t[:, rows(inter, 1)]
        out[name] = t.contiguous()
    return local, out


class TpDecoder(Decoder):
    """One rank's part of the model: torch_decode.py's Decoder of this rank's sizes, each
    row-parallel product summed over the ranks."""

    def __init__(self, header, dtype, weights, max_len, slots, device, gqa, rank):
        super().__init__(header, dtype, weights, max_len, slots, device, gqa)
        self.rank = rank

    def residual_linear(self, x, a, w):
        y = torch.addmm(x, a, w.t()) if self.rank == 0 else torch.mm(a, w.t())
        dist.all_reduce(y)
        return y


def measure(args, make, prompt, vocab):
    """The bench (graphed) and tokens runs on decoders made by make(slots), one at a time."""
    batches = sorted(set(args.batches))
    model = make(batches[-1])
    gen = torch.Generator(device=model.device).manual_seed(1)
    model.k[:, :, :, : args.context].normal_(generator=gen)
    model.v[:, :, :, : args.context].normal_(generator=gen)
    buckets, _ = capture_all(model, batches)
    bench = []
    for b in batches:
        bucket = buckets[b]
        # The same inputs on every rank (a CPU generator of a fixed seed).
        bucket.host[0].copy_(torch.randint(0, vocab, (b,), generator=torch.Generator().manual_seed(b)))
        bucket.host[1].fill_(args.context)
        bucket.host[2].fill_(args.context + 1)
        times = []
        for i in range(args.warmup + args.steps):
            t = time.perf_counter()
            nxt = bucket.step()
            took = time.perf_counter() - t
            if i >= args.warmup:
                times.append(took * 1e6)
            bucket.host[0].copy_(nxt)
        times.sort()
        bench.append((b, times))
    # Graphs holding captured NCCL work go before the process group does.
    del buckets, model
    torch.cuda.synchronize()

    model = make(1)
    buckets, _ = capture_all(model, [1])
    bucket = buckets[1]
    p = len(prompt)
    logits, generated, nxt = [], [], 0
    for pos in range(p + max(args.tokens, 1) - 1):
        token = prompt[pos] if pos < p else nxt
        bucket.host[0, 0], bucket.host[1, 0], bucket.host[2, 0] = token, pos, pos + 1
        nxt = int(bucket.step()[0])
        if pos < p:
            logits.append(bucket.logits[0].float().cpu())
        if pos + 1 >= p:
            generated.append(nxt)
    del buckets, model
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return bench, generated[: args.tokens], torch.stack(logits)


def report(args, name, dname, tp, bench, tokens, prompt):
    for b, times in bench:
        print(
            f"bench impl=torch mode=graph tp={tp} config={name} dtype={dname} batch={b} context={args.context} "
            f"steps={len(times)} median_us={quantile(times, 0.5):.1f} p10_us={quantile(times, 0.1):.1f} "
            f"p90_us={quantile(times, 0.9):.1f} mean_us={sum(times) / len(times):.1f} min_us={times[0]:.1f}",
            flush=True,
        )
    print(
        f"tokens impl=torch tp={tp} config={name} dtype={dname} n={len(tokens)} "
        f"prompt={','.join(map(str, prompt))} tokens={','.join(map(str, tokens))}",
        flush=True,
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--weights", required=True, help="dump directory (decode_bench --dump-weights DIR)")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--max-len", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--gqa", choices=("fold", "repeat", "enable"), default="fold")
    ap.add_argument("--timeout", type=int, default=600, help="seconds a rank waits for the others")
    args = ap.parse_args()
    args.batches = [int(b) for b in args.batches.split(",") if b]
    if not args.batches or min(args.batches) < 1 or args.context < 1 or args.steps < 1:
        raise SystemExit("--batches must be at least 1 each, --context and --steps at least 1")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    t0 = time.perf_counter()
    header, dtype, weights = load(args.weights, "cpu")
    c = header["config"]
    partition(c, world, rank)  # refused before any rank meets the others
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=args.timeout))
    name, dname, prompt = header.get("preset") or "dump", header["dtype"], header["prompt"]
    if not prompt:
        raise SystemExit("the dump has no prompt")
    max_len = max_len_for(args, len(prompt))
    nccl = torch.cuda.nccl.version()
    nccl = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    if rank == 0:
        params = sum(t.numel() for t in weights.values())
        print(
            f"model impl=torch tp={world} config={name} dtype={dname} params={params} layers={c['layers']} "
            f"hidden={c['hidden']} heads={c['heads']} kv_heads={c['kv_heads']} head_dim={c['head_dim']} "
            f"intermediate={c['intermediate']} vocab={c['vocab']} max_len={max_len} backend=torch "
            f"device={torch.cuda.get_device_name(device).replace(' ', '_')} launch=processes "
            f"torch={torch.__version__} nccl={nccl} load_seconds={time.perf_counter() - t0:.3f}",
            flush=True,
        )

    with torch.inference_mode():
        one = None
        if rank == 0:
            # TP=1: the whole model on this GPU, while the other ranks wait at the barrier.
            t1 = time.perf_counter()
            full = {k: v.to(device) for k, v in weights.items()}
            one = measure(args, lambda slots: Decoder(header, dtype, full, max_len, slots, device, args.gqa), prompt, c["vocab"])
            del full
            torch.cuda.empty_cache()
            report(args, name, dname, 1, one[0], one[1], prompt)
            print(f"phase impl=torch config={name} name=tp1 seconds={time.perf_counter() - t1:.3f}", flush=True)
        dist.barrier()

        t1 = time.perf_counter()
        local, part = split_weights(header, weights, world, rank)
        part = {k: v.to(device) for k, v in part.items()}
        make = lambda slots: TpDecoder(local, dtype, part, max_len, slots, device, args.gqa, rank)
        bench, tokens, logits = measure(args, make, prompt, c["vocab"])
        # Every rank's tokens and prompt logits, to check that they sampled alike.
        mine = torch.cat((torch.tensor(tokens, dtype=torch.float32), logits.flatten())).to(device)
        gathered = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(gathered, mine)
        ranks_agree = all(torch.equal(g, gathered[0]) for g in gathered)
        if rank == 0:
            report(args, name, dname, world, bench, tokens, prompt)
            print(f"phase impl=torch config={name} name=tp{world} seconds={time.perf_counter() - t1:.3f}", flush=True)
            _, one_tokens, one_logits = one
            first = next((i for i, (a, b) in enumerate(zip(tokens, one_tokens)) if a != b), None)
            diff = (logits - one_logits).abs().max().item()
            scale = one_logits.abs().max().item()
            same_argmax = (logits.argmax(dim=1) == one_logits.argmax(dim=1)).sum().item()
            print(
                f"compare impl=torch tp={world} config={name} dtype={dname} "
                f"same_tokens={'yes' if tokens == one_tokens else 'no'} "
                f"first_difference={'none' if first is None else first} "
                f"ranks_agree={'yes' if ranks_agree else 'no'} prompt_logits_max_abs_diff={diff:.6e} "
                f"max_abs_logit={scale:.6e} relative={diff / max(scale, 1e-30):.3e} "
                f"same_argmax={same_argmax}/{len(prompt)}",
                flush=True,
            )
        del part
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ranks_agree else 1


if __name__ == "__main__":
    sys.exit(main())
