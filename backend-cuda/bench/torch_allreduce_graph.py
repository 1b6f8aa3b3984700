"""PyTorch's side of backend-cuda/examples/allreduce_graph.rs: the same tensor-parallel-style
step of 64 layers (per layer: x += 1 on a 4 to 64 KiB message, cycling; an in-place
all-reduce of it through torch.distributed's NCCL backend; and x *= 1/world on more than one
rank), issued eagerly and as one torch.cuda.graph replayed, with the same warm-up and counts.
Every element must equal the number of steps run, exactly (worlds that are powers of two).

    python3 torch_allreduce_graph.py [--world N] [--replays 10000] [--eager 1000] [--layers 64]

--world 1 (default) runs in this process; a larger world starts one process per GPU
(torch.multiprocessing). The process group is initialised with a file:// init method in a
fresh temporary directory: no network is needed. Prints one line per rank, in the example's
format ("allreduce_graph: impl=torch ...").
"""

import argparse
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WARM_UP = 5


def elements(layer):
    return (4096 << (layer % 5)) // 4


def step(xs, world):
    for x in xs:
        x.add_(1.0)
        dist.all_reduce(x)
        if world > 1:
            x.mul_(1.0 / world)


def run(rank, world, init_file, args):
    torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl", init_method=f"file://{init_file}", rank=rank, world_size=world
    )
    dev = torch.device("cuda", rank)
    xs = [torch.zeros(elements(layer), device=dev) for layer in range(args.layers)]
    stream = torch.cuda.Stream()
    # Warm-up on a side stream, as torch.cuda.graph's documentation asks before capturing.
    with torch.cuda.stream(stream):
        for _ in range(WARM_UP):
            step(xs, world)
    torch.cuda.synchronize()

    t = time.perf_counter()
    with torch.cuda.stream(stream):
        for _ in range(args.eager):
            step(xs, world)
    torch.cuda.synchronize()
    eager_us = (time.perf_counter() - t) * 1e6 / max(args.eager, 1)

    graph = torch.cuda.CUDAGraph()
    dist.barrier()
    torch.cuda.synchronize()
    with torch.cuda.graph(graph, stream=stream):
        step(xs, world)
    dist.barrier()
    torch.cuda.synchronize()
    for _ in range(WARM_UP):
        graph.replay()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(args.replays):
        graph.replay()
    torch.cuda.synchronize()
    graphed_us = (time.perf_counter() - t) * 1e6 / max(args.replays, 1)

    expected = float(2 * WARM_UP + args.eager + args.replays)
    worst = max(float((x - expected).abs().max()) for x in xs)
    exact = worst == 0.0
    nccl = torch.cuda.nccl.version()
    nccl = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    print(
        f"allreduce_graph: impl=torch rank={rank} world={world} launch=processes "
        f"backend=torch {torch.__version__} NCCL {nccl} "
        f"({torch.cuda.get_device_name(dev)}) layers={args.layers} messages=4-64KiB "
        f"eager_us_per_iter={eager_us:.1f} graphed_us_per_iter={graphed_us:.1f} "
        f"speedup={eager_us / graphed_us:.2f} replays={args.replays} "
        f"exact={'yes' if exact else 'no'} (every element {expected} on this rank, "
        f"worst error {worst})",
        flush=True,
    )
    # A graph holding captured NCCL work keeps the communicator busy: with two ranks or more,
    # destroy_process_group() hangs in ncclCommDestroy while it lives. Release it first.
    del graph
    torch.cuda.synchronize()
    dist.destroy_process_group()
    if not exact and (world & (world - 1)) == 0:
        raise SystemExit(1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world", type=int, default=1)
    parser.add_argument("--replays", type=int, default=10_000)
    parser.add_argument("--eager", type=int, default=1_000)
    parser.add_argument("--layers", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "init")
        if args.world == 1:
            run(0, 1, init_file, args)
        else:
            mp.spawn(run, args=(args.world, init_file, args), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
