"""The perceptron training step of accel_graph_examples::mlp in PyTorch, eager and captured
whole with torch.cuda.graph (the documentation's "whole network capture"), from the same
initial parameters and inputs as the Rust run that wrote DIR (`mlp_train_step --dump DIR`).

Checks that PyTorch, started from the same parameters, ends `check_steps` steps later where
accel-graph ended (max |difference| of the parameters, against a tolerance relative to their
size), times both ways of running the step, and prints the side-by-side table with accel-graph's
figures from DIR/accel_results.txt.

    python3 torch_mlp.py DIR [STEPS]
"""

import statistics
import sys
import time

import torch

ALIGN = 64
TOLERANCE = 1e-4  # max |Δθ| ≤ TOLERANCE · max|θ| after check_steps steps (f32 GEMMs differ in order)


def layout(inp, hid, out):
    at, ranges = 0, []
    for n in (inp * hid, hid, hid * out, out):
        ranges.append((at, at + n))
        at = (at + n + ALIGN - 1) // ALIGN * ALIGN
    return ranges, at


def load(path, n=None):
    t = torch.frombuffer(bytearray(open(path, "rb").read()), dtype=torch.float32)
    return t if n is None else t[:n]


def model_from(flat, inp, hid, out, dev):
    (w1, b1, w2, b2), _ = layout(inp, hid, out)
    m = torch.nn.Sequential(torch.nn.Linear(inp, hid), torch.nn.ReLU(), torch.nn.Linear(hid, out)).to(dev)
    with torch.no_grad():
        m[0].weight.copy_(flat[w1[0]:w1[1]].view(inp, hid).t())
        m[0].bias.copy_(flat[b1[0]:b1[1]])
        m[2].weight.copy_(flat[w2[0]:w2[1]].view(hid, out).t())
        m[2].bias.copy_(flat[b2[0]:b2[1]])
    return m


def flat_of(m, inp, hid, out):
    (w1, b1, w2, b2), n = layout(inp, hid, out)
    flat = torch.zeros(n)
    flat[w1[0]:w1[1]] = m[0].weight.detach().t().reshape(-1).cpu()
    flat[b1[0]:b1[1]] = m[0].bias.detach().cpu()
    flat[w2[0]:w2[1]] = m[2].weight.detach().t().reshape(-1).cpu()
    flat[b2[0]:b2[1]] = m[2].bias.detach().cpu()
    return flat


def time_steps(run, steps):
    per_round = max(steps // 5, 1)
    rounds = []
    for _ in range(5):
        torch.cuda.synchronize()
        t = time.perf_counter()
        run(per_round)
        torch.cuda.synchronize()
        rounds.append((time.perf_counter() - t) * 1e3 / per_round)
    return statistics.median(rounds)


def main():
    d = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    torch.backends.cuda.matmul.allow_tf32 = False
    conf = dict(kv.split("=") for kv in open(f"{d}/shape.txt").read().split())
    inp, hid, out = int(conf["input"]), int(conf["hidden"]), int(conf["output"])
    lr, check_steps = float(conf["lr"]), int(conf["check_steps"])
    dev = torch.device("cuda")
    lines = []
    for batch in [int(b) for b in conf["batches"].split(",")]:
        init = load(f"{d}/init_{batch}.f32")
        x = load(f"{d}/x_{batch}.f32").view(batch, inp).to(dev)
        t = load(f"{d}/t_{batch}.f32").view(batch, out).to(dev)

        def make():
            m = model_from(init, inp, hid, out, dev)
            return m, torch.optim.SGD(m.parameters(), lr=lr)

        def step(m, opt, x, t):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(m(x), t)
            loss.backward()
            opt.step()
            return loss

        # Same start, same steps: where does PyTorch end?
        m, opt = make()
        for _ in range(check_steps):
            step(m, opt, x, t)
        ours = load(f"{d}/after_{batch}.f32")
        theirs = flat_of(m, inp, hid, out)
        diff = (ours - theirs).abs().max().item()
        scale = theirs.abs().max().item()
        ok = diff <= TOLERANCE * scale
        lines.append(f"torch-check: batch={batch} max_param_diff={diff:e} max_param={scale} "
                     f"tolerance={TOLERANCE * scale:e} {'OK' if ok else 'FAILED'}")

        # Eager.
        m, opt = make()
        for _ in range(3):
            step(m, opt, x, t)
        eager_ms = time_steps(lambda n: [step(m, opt, x, t) for _ in range(n)], steps)

        # Graphed: warm up on a side stream, capture the whole step, replay.
        m, opt = make()
        sx, st = x.clone(), t.clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step(m, opt, sx, st)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(g):
            static_loss = torch.nn.functional.mse_loss(m(sx), st)
            static_loss.backward()
            opt.step()

        def replays(n):
            for _ in range(n):
                sx.copy_(x)
                st.copy_(t)
                g.replay()

        graphed_ms = time_steps(replays, steps)
        lines.append(f"torch: batch={batch} eager_ms={eager_ms:.4f} graphed_ms={graphed_ms:.4f}")
        for line in lines[-2:]:
            print(line, flush=True)

    with open(f"{d}/torch_results.txt", "w") as f:
        f.write("\n".join(lines) + "\n")

    # The side-by-side table.
    def parse(path, tag):
        rows = {}
        for line in open(path):
            if line.startswith(tag + ":"):
                kv = dict(p.split("=") for p in line.split()[1:] if "=" in p)
                rows[int(kv["batch"])] = kv
        return rows

    ours, theirs = parse(f"{d}/accel_results.txt", "accel"), parse(f"{d}/torch_results.txt", "torch")
    print("model step (ms): batch | accel eager | accel graphed | torch eager | torch graphed | "
          "accel graphed / torch graphed | graphed/eager accel | graphed/eager torch")
    for batch in sorted(ours):
        if batch not in theirs:
            continue
        ae, ag = float(ours[batch]["eager_ms"]), float(ours[batch]["graphed_ms"])
        te, tg = float(theirs[batch]["eager_ms"]), float(theirs[batch]["graphed_ms"])
        print(f"mlp: batch={batch} accel_eager={ae:.4f} accel_graphed={ag:.4f} torch_eager={te:.4f} "
              f"torch_graphed={tg:.4f} ratio_graphed={ag / tg:.3f} accel_graphed_over_eager={ag / ae:.3f} "
              f"torch_graphed_over_eager={tg / te:.3f}")
    if not all("OK" in line for line in lines if line.startswith("torch-check")):
        sys.exit(1)


if __name__ == "__main__":
    main()
