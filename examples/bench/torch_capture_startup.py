"""PyTorch 2.11's side of examples/src/bin/capture_startup.rs, from a fresh process:

  --mode chain:   the first capture + instantiate of KERNELS `x.add_(1)` kernels (kernels loaded
                  by one eager op first), its first replay and a steady one; with --upload the
                  executable is uploaded too (cuGraphUpload, as accel-graph's instantiate does),
                  printed as mode=torch_upload;
  --mode buckets: vLLM's pre-capture: BUCKETS graphs of an OPS-op step (sizes 1, 2, 4, then
                  every 8), largest first, sharing one pool (torch.cuda.graph_pool_handle),
                  each warmed up once on a side stream; total time and peak memory.

Prints lines in the format the Rust binary prints, with mode=torch.
"""

import argparse
import ctypes
import resource
import statistics
import time

import torch


def minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def upload(cuda, g, s):
    """cuGraphUpload of the graph's executable (PyTorch has no call for it): what accel-graph's
    instantiate does, so that the first replay runs at the steady pace."""
    rc = cuda.cuGraphUpload(ctypes.c_void_p(g.raw_cuda_graph_exec()), ctypes.c_void_p(s.cuda_stream))
    if rc != 0:
        raise RuntimeError(f"cuGraphUpload: {rc}")


def chain(kernels, with_upload):
    x = torch.zeros(1024, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x.add_(1.0)
    # The driver library opened before the timer (PyTorch has it loaded already).
    cuda = ctypes.CDLL("libcuda.so.1") if with_upload else None
    torch.cuda.synchronize()
    f0 = minor_faults()
    t0 = time.perf_counter()
    g = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.stream(s):
        g.capture_begin()
        for _ in range(kernels):
            x.add_(1.0)
        g.capture_end()
    t1 = time.perf_counter()
    f1 = minor_faults()
    with torch.cuda.stream(s):
        g.instantiate()
    if with_upload:
        upload(cuda, g, s)
    s.synchronize()
    t2 = time.perf_counter()
    f2 = minor_faults()

    def replay():
        t = time.perf_counter()
        with torch.cuda.stream(s):
            g.replay()
        s.synchronize()
        return time.perf_counter() - t

    first = replay()
    steady = statistics.median(replay() for _ in range(9))
    us = lambda v: v * 1e6
    mode = "torch_upload" if with_upload else "torch"
    print(f"startup: mode={mode} kernels={kernels} capture_us={us(t1 - t0):.1f} "
          f"instantiate_us={us(t2 - t1):.1f} total_us={us(t2 - t0):.1f} "
          f"first_replay_us={us(first):.1f} steady_replay_us={us(steady):.1f} "
          f"capture_faults={f1 - f0} instantiate_faults={f2 - f1}", flush=True)


def bucket_sizes(n):
    sizes, nxt = [1, 2, 4], 8
    while len(sizes) < n:
        sizes.append(nxt)
        nxt += 8
    return sizes[:n]


def step(x, ops):
    h = x.clone()
    temps = []
    for i in range(max(ops - 2, 0)):
        k = i % 4
        if k == 0:
            h.mul_(0.5)
        elif k == 1:
            h.add_(1.0)
        elif k == 2:
            h.add_(x, alpha=0.25)
        else:
            temps.append(h.clone())
            if len(temps) > 2:
                temps.pop(0)
    return h.clone()


def buckets(n, ops, width):
    torch.cuda.synchronize()
    free_before, _ = torch.cuda.mem_get_info()
    t0 = time.perf_counter()
    pool = torch.cuda.graph_pool_handle()
    graphs = {}
    for size in reversed(bucket_sizes(n)):
        x = torch.zeros(size, width, device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            step(x, ops)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool):
            out = step(x, ops)
        graphs[size] = (g, x, out)
    torch.cuda.synchronize()
    total = time.perf_counter() - t0
    free_after, _ = torch.cuda.mem_get_info()
    mib = 1 << 20
    print(f"startup-set: mode=torch buckets={n} ops={ops} width={width} threads=1 "
          f"total_ms={total * 1e3:.2f} reserved_mib={torch.cuda.max_memory_reserved() / mib:.1f} "
          f"device_used_mib={(free_before - free_after) / mib:.1f}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["chain", "buckets"], default="chain")
    p.add_argument("--kernels", type=int, default=1000)
    p.add_argument("--buckets", type=int, default=32)
    p.add_argument("--ops", type=int, default=1000)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--upload", action="store_true",
                   help="chain: upload the executable after instantiating it, as accel-graph does")
    a = p.parse_args()
    if a.mode == "chain":
        chain(a.kernels, a.upload)
    else:
        buckets(a.buckets, a.ops, a.width)


if __name__ == "__main__":
    main()
