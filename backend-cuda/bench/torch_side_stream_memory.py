"""PyTorch's side of examples/src/bin/side_stream_memory.rs: the same multi-stream capture with
torch.cuda.graph, and the bytes its graph's private memory pool reserves.

One step of a training-like loop, captured on a main stream that forks a side stream
(side.wait_stream(main)): the side branch computes a chain of eight temporaries of 4 MiB each
(every one freed inside the capture), the main branch four temporaries of its own, and the
branches join (main.wait_stream(side)) into the step's output.

Writes "pool_reserved_bytes N" to the file named by the first argument (the example reads it
with --torch to print accel-graph / PyTorch) and prints it, with the reserved-bytes growth of
the whole capture as torch.cuda.memory_stats reports it.

    python3 backend-cuda/bench/torch_side_stream_memory.py torch_side_stream_memory.txt
"""

import sys

import torch

MIB = 1 << 18  # float32 elements per MiB
ELEMS = 4 * MIB
SIDE_TEMPS = 8
MAIN_TEMPS = 4


def step(x, main, side):
    """One step, with `main` current: the calls of `step` in side_stream_memory.rs, in order."""
    side.wait_stream(main)
    with torch.cuda.stream(side):
        acc_side = torch.empty(ELEMS, device=x.device)
        acc_side.fill_(0.0)
        prev = torch.empty(ELEMS, device=x.device)
        prev.copy_(x)
        for _ in range(1, SIDE_TEMPS):
            t = torch.empty(ELEMS, device=x.device)
            t.copy_(prev)
            t.mul_(0.5)
            t.add_(1.0)
            acc_side.add_(t, alpha=1.0)
            # The previous temporary is freed here, on the side stream.
            prev = t
        del prev, t
    acc_main = torch.empty(ELEMS, device=x.device)
    acc_main.fill_(0.0)
    for i in range(MAIN_TEMPS):
        m = torch.empty(ELEMS, device=x.device)
        m.copy_(x)
        m.add_(float(i))
        acc_main.add_(m, alpha=2.0)
        del m
    main.wait_stream(side)
    out = torch.empty(ELEMS, device=x.device)
    out.copy_(acc_main)
    out.add_(acc_side, alpha=1.0)
    del acc_main, acc_side
    return out


def pool_reserved_bytes(pool):
    """Bytes of the segments of the private pool `pool` (a graph's pool() id)."""
    pool = tuple(pool)
    return sum(
        seg["total_size"]
        for seg in torch.cuda.memory_snapshot()
        if tuple(seg.get("segment_pool_id", (0, 0))) == pool
    )


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else "torch_side_stream_memory.txt"
    dev = torch.device("cuda")
    main_stream = torch.cuda.Stream()
    side = torch.cuda.Stream()
    x = torch.ones(ELEMS, device=dev)
    # Warm-up on the streams of the capture, eagerly (PyTorch's advice before capturing); its
    # memory lives in the ordinary caching allocator, not in the graph's pool.
    with torch.cuda.stream(main_stream):
        eager = step(x, main_stream, side).clone()
    torch.cuda.synchronize()
    # torch.cuda.graph empties the cache before it captures: do it first, so the growth below
    # is the capture's own.
    torch.cuda.empty_cache()

    reserved_before = torch.cuda.memory_stats()["reserved_bytes.all.current"]
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=main_stream):
        out = step(x, main_stream, side)
    torch.cuda.synchronize()
    reserved_growth = torch.cuda.memory_stats()["reserved_bytes.all.current"] - reserved_before
    pool_bytes = pool_reserved_bytes(g.pool())

    with torch.cuda.stream(main_stream):
        out.fill_(0.0)
        g.replay()
    torch.cuda.synchronize()
    same = torch.equal(out, eager)

    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name()}")
    print(
        f"step: {SIDE_TEMPS} side temporaries and {MAIN_TEMPS} main temporaries of "
        f"{ELEMS // MIB} MiB, two accumulators, one output; replay equals eager: {same}"
    )
    print(f"pool_reserved_bytes {pool_bytes}")
    print(
        f"torch: the graph's pool reserves {pool_bytes / (1 << 20):.1f} MiB "
        f"(reserved bytes grew by {reserved_growth / (1 << 20):.1f} MiB during the capture)"
    )
    with open(out_path, "w") as f:
        f.write(f"pool_reserved_bytes {pool_bytes}\n")
        f.write(f"capture_reserved_growth_bytes {reserved_growth}\n")
    if not same:
        sys.exit("the replayed step differs from the eager step")


if __name__ == "__main__":
    main()
