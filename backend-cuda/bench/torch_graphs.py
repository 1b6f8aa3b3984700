"""PyTorch's torch.cuda.CUDAGraph on the workloads of the CUDA backend's example
backend-cuda/examples/graph_overhead_vs_raw_cuda.rs.

Writes "key value" lines to the file named by the first argument (read by that example to
print ours/torch ratios) and prints them.

(a) host cost of replaying a 1-node graph (x.add_(1) on 1024 floats), batches of 64 launches;
(b) capture + instantiate of 1000 such kernels (capture_begin/capture_end on a side stream);
(c) GPU time per replayed node of the 1000-kernel chain, by CUDA events;
(d) eager issue of the 1000 kernels + sync vs one replay + sync.
"""

import statistics
import sys
import time

import torch

ELEMS = 1024
CHAIN = 1000
BATCH = 64


def capture(x, k, stream):
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        g.capture_begin()
        for _ in range(k):
            x.add_(1.0)
        g.capture_end()
    return g


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else "torch_results.txt"
    dev = torch.device("cuda")
    x = torch.zeros(ELEMS, device=dev)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for _ in range(10):
            x.add_(1.0)  # warm-up: kernels loaded before any capture
    torch.cuda.synchronize()

    results = {}
    with torch.cuda.stream(s):
        g1 = capture(x, 1, s)
        samples = []
        for _ in range(400):
            s.synchronize()
            t = time.perf_counter_ns()
            for _ in range(BATCH):
                g1.replay()
            samples.append((time.perf_counter_ns() - t) / BATCH)
        results["replay_host_ns"] = statistics.median(samples[20:])

        samples = []
        for _ in range(24):
            s.synchronize()
            t = time.perf_counter_ns()
            g = capture(x, CHAIN, s)
            s.synchronize()
            samples.append((time.perf_counter_ns() - t) / 1e3)
            del g
        results["capture_instantiate_1000_us"] = statistics.median(samples[2:])

        gk = capture(x, CHAIN, s)
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        samples = []
        for _ in range(60):
            e0.record(s)
            gk.replay()
            e1.record(s)
            s.synchronize()
            samples.append(e0.elapsed_time(e1) * 1e6 / CHAIN)
        results["gpu_ns_per_node"] = statistics.median(samples[4:])

        eager, replay = [], []
        for _ in range(30):
            s.synchronize()
            t = time.perf_counter_ns()
            for _ in range(CHAIN):
                x.add_(1.0)
            s.synchronize()
            eager.append((time.perf_counter_ns() - t) / 1e3)
            t = time.perf_counter_ns()
            gk.replay()
            s.synchronize()
            replay.append((time.perf_counter_ns() - t) / 1e3)
        results["eager_1000_us"] = statistics.median(eager[2:])
        results["replay_1000_us"] = statistics.median(replay[2:])

    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name()}")
    with open(out_path, "w") as f:
        for k, v in results.items():
            f.write(f"{k} {v:.3f}\n")
            print(f"torch: {k} {v:.3f}")


if __name__ == "__main__":
    main()
