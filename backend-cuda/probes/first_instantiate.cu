// A process's first capture + instantiate + upload of a chain of 1000 kernels in plain CUDA C,
// and what makes it cheaper: run once per fresh process with one variant.
//
//   base          the chain as accel-graph's start-up benchmark makes it
//   noupload      without cuGraphUpload
//   warm-empty    after a 1-node graph was instantiated and uploaded (the driver's graph
//                 machinery initialized)
//   warm-kernel16 after a 16-kernel chain went through the same steps
//   warm-chain100 after a 100-kernel chain did
//   warm-chain    after a 1000-kernel chain did (and was destroyed): the warm cost
//   on-thread     the base chain made on a second thread (another malloc arena)
//
// Prints the times and the minor page faults of the capture and of instantiate + upload: the
// first chain's cost is largely the driver's fresh host memory being touched.
#include <cuda_runtime.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

__global__ void add1(float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += a;
}

using clk = std::chrono::steady_clock;
static double us(clk::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }
static long faults() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

struct Chain {
  double capture_us, instantiate_us, total_us;
  long capture_faults, instantiate_faults;
};

static const unsigned long long FLAGS =
    cudaGraphInstantiateFlagAutoFreeOnLaunch | cudaGraphInstantiateFlagUseNodePriority;

static Chain chain(cudaStream_t s, float* x, int k, bool upload) {
  long f0 = faults();
  auto t0 = clk::now();
  cudaGraph_t g;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
  for (int i = 0; i < k; ++i) add1<<<4, 256, 0, s>>>(x, 1.0f, 1024);
  cudaStreamEndCapture(s, &g);
  auto t1 = clk::now();
  long f1 = faults();
  cudaGraphExec_t e;
  cudaGraphInstantiateWithFlags(&e, g, FLAGS);
  if (upload) cudaGraphUpload(e, s);
  cudaStreamSynchronize(s);
  auto t2 = clk::now();
  Chain c{us(t1 - t0), us(t2 - t1), us(t2 - t0), f1 - f0, faults() - f1};
  cudaGraphExecDestroy(e);
  cudaGraphDestroy(g);
  return c;
}

int main(int argc, char** argv) {
  const char* v = argc > 1 ? argv[1] : "base";
  float* x;
  cudaMalloc(&x, 4096);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  add1<<<4, 256, 0, s>>>(x, 1.0f, 1024);  // the kernel loaded, as by any eager op
  cudaStreamSynchronize(s);
  auto w0 = clk::now();
  if (!strcmp(v, "warm-empty")) {
    cudaGraph_t g;
    cudaGraphCreate(&g, 0);
    cudaGraphNode_t n;
    cudaGraphAddEmptyNode(&n, g, nullptr, 0);
    cudaGraphExec_t e;
    cudaGraphInstantiateWithFlags(&e, g, FLAGS);
    cudaGraphUpload(e, s);
    cudaStreamSynchronize(s);
    cudaGraphExecDestroy(e);
    cudaGraphDestroy(g);
  } else if (!strcmp(v, "warm-kernel16")) {
    chain(s, x, 16, true);
  } else if (!strcmp(v, "warm-chain100")) {
    chain(s, x, 100, true);
  } else if (!strcmp(v, "warm-chain")) {
    chain(s, x, 1000, true);
  }
  double warm = us(clk::now() - w0);
  Chain c;
  if (!strcmp(v, "on-thread")) {
    std::thread([&] { c = chain(s, x, 1000, true); }).join();
  } else {
    c = chain(s, x, 1000, strcmp(v, "noupload") != 0);
  }
  printf("first-instantiate: variant=%s warm_us=%.1f capture_us=%.1f instantiate_us=%.1f "
         "total_us=%.1f capture_faults=%ld instantiate_faults=%ld status=%s\n",
         v, warm, c.capture_us, c.instantiate_us, c.total_us, c.capture_faults,
         c.instantiate_faults, cudaGetErrorString(cudaGetLastError()));
}
