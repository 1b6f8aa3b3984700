// What one thread's stream work costs while another thread instantiates or uploads a
// 1000-kernel graph of the same context (the bucketed cache's background instantiation), and
// what cuStreamGetCaptureInfo adds per captured launch (the layer's node naming). Warm process.
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

__global__ void add1(float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += a;
}

using clk = std::chrono::steady_clock;
static double us(clk::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

static cudaGraph_t capture(cudaStream_t s, float* x, int k) {
  cudaGraph_t g;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  for (int i = 0; i < k; ++i) add1<<<4, 256, 0, s>>>(x, 1.0f, 1024);
  cudaStreamEndCapture(s, &g);
  return g;
}

int main() {
  float* x;
  cudaMalloc(&x, 1 << 22);
  cudaStream_t s, s2;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
  for (int i = 0; i < 3; ++i) {  // warm: the driver's graph memory in use once
    cudaGraph_t g = capture(s, x, 1000);
    cudaGraphExec_t e;
    cudaGraphInstantiate(&e, g, 0);
    cudaGraphUpload(e, s);
    cudaStreamSynchronize(s);
    cudaGraphExecDestroy(e);
    cudaGraphDestroy(g);
  }
  for (int r = 0; r < 3; ++r) {
    for (int info = 0; info < 2; ++info) {
      auto t0 = clk::now();
      cudaGraph_t g;
      cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
      for (int i = 0; i < 1000; ++i) {
        add1<<<4, 256, 0, s>>>(x, 1.0f, 1024);
        if (info) {
          CUstreamCaptureStatus status;
          cuuint64_t id;
          CUgraph graph;
          const CUgraphNode* deps;
          const CUgraphEdgeData* edges;
          size_t n;
          cuStreamGetCaptureInfo((CUstream)s, &status, &id, &graph, &deps, &edges, &n);
        }
      }
      cudaStreamEndCapture(s, &g);
      printf("contention: round=%d capture of 1000 launches, capture info per launch=%s: %.1f us\n",
             r, info ? "yes" : "no", us(clk::now() - t0));
      cudaGraphDestroy(g);
    }
  }
  const char* works[] = {"eager-launch", "captured-launch", "eager-memcpy"};
  const char* others[] = {"none", "instantiate", "upload"};
  for (int r = 0; r < 3; ++r) {
    for (int work = 0; work < 3; ++work) {
      for (int busy = 0; busy < 3; ++busy) {
        cudaGraph_t other = capture(s2, x, 1000);
        cudaGraphExec_t exec = nullptr;
        if (busy == 2) cudaGraphInstantiate(&exec, other, 0);
        cudaDeviceSynchronize();
        std::atomic<bool> go{false};
        double other_us = 0;
        std::thread t([&] {
          while (!go.load()) {
          }
          auto a = clk::now();
          if (busy == 1) cudaGraphInstantiate(&exec, other, 0);
          if (busy == 2) cudaGraphUpload(exec, s2);
          other_us = us(clk::now() - a);
        });
        go = true;
        auto t0 = clk::now();
        cudaGraph_t g = nullptr;
        if (work == 1) cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
        for (int i = 0; i < 1000; ++i) {
          if (work == 2)
            cudaMemcpyAsync(x, x + 4096, 4096, cudaMemcpyDeviceToDevice, s);
          else
            add1<<<4, 256, 0, s>>>(x, 1.0f, 1024);
        }
        if (work == 1) cudaStreamEndCapture(s, &g);
        double mine = us(clk::now() - t0);
        t.join();
        cudaDeviceSynchronize();
        printf("contention: round=%d work=%s other_thread=%s work_us=%.1f other_us=%.1f\n", r,
               works[work], others[busy], mine, other_us);
        if (g) cudaGraphDestroy(g);
        if (exec) cudaGraphExecDestroy(exec);
        cudaGraphDestroy(other);
      }
    }
  }
  printf("contention: status=%s\n", cudaGetErrorString(cudaGetLastError()));
}
