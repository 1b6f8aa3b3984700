// What a conditional WHILE node costs per iteration in the CUDA driver itself, with no layer
// above it: the same work as `graph_editing`'s loop benchmark (100 iterations of a body of 10
// small kernels, the last decrementing a counter), built with the runtime's graph API.
//
//   unrolled   one graph of the 1000 kernels                     (GPU time)
//   while K    a WHILE node whose body is K kernels plus the kernel that sets the condition
//              from the counter (K = 10: the benchmark's loop; K = 0: the node's own cost)
//   host       the 10-kernel body as a graph, launched once per iteration, the counter copied
//              back and tested on the host                        (wall time)
//
// Prints per-iteration figures and the two ratios the benchmark targets (host / while >= 2,
// while / unrolled <= 1.1), as this driver allows them.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                    \
  do {                                                                              \
    cudaError_t e_ = (x);                                                           \
    if (e_ != cudaSuccess) {                                                        \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x,                \
                   cudaGetErrorString(e_));                                         \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

constexpr int N = 1024, ITER = 100, BODY = 10;

__global__ void axpy(float* y, const float* x, float a) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) y[i] = y[i] * a + x[i];
}
__global__ void decrement(float* left) { left[0] -= 1.0f; }
__global__ void fill(float* left, float v) { left[0] = v; }
__global__ void set_condition(cudaGraphConditionalHandle h, const float* left) {
  cudaGraphSetConditional(h, left[0] != 0.0f);
}

// The body: BODY-1 axpys then the decrement (k kernels in all; k = 0: none).
static void body(cudaStream_t s, float* y, float* x, float* left, int k) {
  for (int i = 0; i + 1 < k; ++i) axpy<<<4, 256, 0, s>>>(y, x, 0.5f);
  if (k > 0) decrement<<<1, 1, 0, s>>>(left);
}

static float gpu_us(cudaGraphExec_t exec, cudaStream_t s, int reps) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  CHECK(cudaGraphLaunch(exec, s));  // warm
  CHECK(cudaStreamSynchronize(s));
  std::vector<float> t;
  for (int r = 0; r < reps; ++r) {
    CHECK(cudaEventRecord(a, s));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1e3f);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

static cudaGraphExec_t instantiate(cudaGraph_t g) {
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, g, 0));
  return exec;
}

// fill(counter) then WHILE(counter != 0) { body(k); set_condition }.
static cudaGraphExec_t while_graph(cudaStream_t s, float* y, float* x, float* left, int k,
                                   float start) {
  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  cudaGraphConditionalHandle h;
  CHECK(cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault));
  // The fill, captured into the graph first.
  CHECK(cudaStreamBeginCaptureToGraph(s, g, nullptr, nullptr, 0, cudaStreamCaptureModeGlobal));
  fill<<<1, 1, 0, s>>>(left, start);
  CHECK(cudaStreamEndCapture(s, &g));
  // The fill is the graph's only node: the loop comes after it.
  std::vector<cudaGraphNode_t> after(1);
  size_t count = 1;
  CHECK(cudaGraphGetNodes(g, after.data(), &count));
  cudaGraphNodeParams p = {};
  p.type = cudaGraphNodeTypeConditional;
  p.conditional.handle = h;
  p.conditional.type = cudaGraphCondTypeWhile;
  p.conditional.size = 1;
  cudaGraphNode_t node;
#if CUDART_VERSION >= 13000
  CHECK(cudaGraphAddNode(&node, g, after.data(), nullptr, after.size(), &p));
#else
  CHECK(cudaGraphAddNode(&node, g, after.data(), after.size(), &p));
#endif
  cudaGraph_t bodyg = p.conditional.phGraph_out[0];
  CHECK(cudaStreamBeginCaptureToGraph(s, bodyg, nullptr, nullptr, 0,
                                      cudaStreamCaptureModeGlobal));
  body(s, y, x, left, k);
  if (k == 0) decrement<<<1, 1, 0, s>>>(left);  // the loop must still end
  set_condition<<<1, 1, 0, s>>>(h, left);
  CHECK(cudaStreamEndCapture(s, &bodyg));
  return instantiate(g);
}

int main() {
  float *y, *x, *left;
  CHECK(cudaMalloc(&y, N * sizeof(float)));
  CHECK(cudaMalloc(&x, N * sizeof(float)));
  CHECK(cudaMalloc(&left, sizeof(float)));
  CHECK(cudaMemset(y, 0, N * sizeof(float)));
  CHECK(cudaMemset(x, 0, N * sizeof(float)));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int driver;
  CHECK(cudaDriverGetVersion(&driver));

  // Unrolled.
  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  fill<<<1, 1, 0, s>>>(left, ITER);
  for (int i = 0; i < ITER; ++i) body(s, y, x, left, BODY);
  CHECK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t unrolled = instantiate(g);
  float unrolled_us = gpu_us(unrolled, s, 20);

  // WHILE with the benchmark's body, and with an empty body (the node's own cost).
  float while_us = gpu_us(while_graph(s, y, x, left, BODY, ITER), s, 20);
  float empty_us = gpu_us(while_graph(s, y, x, left, 0, ITER), s, 20);
  float one_iter_empty = gpu_us(while_graph(s, y, x, left, 0, 1), s, 20);

  // Host-driven loop: the body as a graph, the counter read back after each launch.
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  body(s, y, x, left, BODY);
  CHECK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t one = instantiate(g);
  float body_us = gpu_us(one, s, 20);
  std::vector<double> walls;
  for (int r = 0; r < 11; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    fill<<<1, 1, 0, s>>>(left, ITER);
    float host_left = 1;
    while (host_left != 0) {
      CHECK(cudaGraphLaunch(one, s));
      CHECK(cudaMemcpyAsync(&host_left, left, sizeof(float), cudaMemcpyDeviceToHost, s));
      CHECK(cudaStreamSynchronize(s));
    }
    walls.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(walls.begin(), walls.end());
  double host_us = walls[walls.size() / 2];

  // The WHILE loop's wall time for one launch.
  cudaGraphExec_t looped = while_graph(s, y, x, left, BODY, ITER);
  CHECK(cudaGraphLaunch(looped, s));
  CHECK(cudaStreamSynchronize(s));
  walls.clear();
  for (int r = 0; r < 21; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    CHECK(cudaGraphLaunch(looped, s));
    CHECK(cudaStreamSynchronize(s));
    walls.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(walls.begin(), walls.end());
  double while_wall = walls[walls.size() / 2];

  std::printf("while-probe: driver=%d unrolled_gpu_us=%.1f while_gpu_us=%.1f "
              "while_empty_body_gpu_us=%.1f while_one_iteration_gpu_us=%.1f body_graph_gpu_us=%.1f "
              "host_loop_wall_us=%.1f while_wall_us=%.1f\n",
              driver, unrolled_us, while_us, empty_us, one_iter_empty, body_us, host_us,
              while_wall);
  std::printf("while-probe: per iteration: loop overhead %.2f us (while - unrolled), "
              "empty-body iteration %.2f us, host loop %.2f us wall\n",
              (while_us - unrolled_us) / ITER, empty_us / ITER, host_us / ITER);
  std::printf("while-probe: raw CUDA: host/while wall %.2f (target >= 2), while/unrolled GPU "
              "%.3f (target <= 1.1)\n",
              host_us / while_wall, while_us / unrolled_us);
  return 0;
}
