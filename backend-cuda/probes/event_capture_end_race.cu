// Probes the CUDA driver for the defect accel-graph's `CaptureLinks` lock works around: an event
// last recorded in a stream capture, recorded again on another stream while another thread
// ends that capture. Variants (first argument):
//   joined | unjoined    sequential: the capture ends (joined, or with forked work unjoined),
//                        then the event is recorded again, 1000 times (expected: no crash)
//   race-turn N          N captures grown and ended by one thread while another records an
//                        event into them and again outside them, every call in one turn, as
//                        the driver layer makes them (expected: no crash)
//   race-end N           the outside record kept apart from the capture's end only, not from
//                        its growth (reported)
//   race N               the outside record unserialised (reported; the driver crashed on H100
//                        and H200, driver 580)
// Run by backend-cuda/probes/event_capture_end_race.sh.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <atomic>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess && verbose) printf("  %s -> %s\n", #x, cudaGetErrorName(e_)); } while (0)
static bool verbose = true;
__global__ void k(float *p) { if (p) p[threadIdx.x] += 1.f; }

static void sequential(const char *variant) {
  cudaStream_t s1, s2, s3; cudaEvent_t e, j;
  cudaStreamCreate(&s1); cudaStreamCreate(&s2); cudaStreamCreate(&s3);
  cudaEventCreateWithFlags(&e, cudaEventDisableTiming); cudaEventCreateWithFlags(&j, cudaEventDisableTiming);
  for (int i = 0; i < 1000; i++) {
    cudaGraph_t g = nullptr;
    CK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeRelaxed));
    k<<<1, 1, 0, s1>>>(nullptr);
    CK(cudaEventRecord(e, s1));
    CK(cudaStreamWaitEvent(s2, e, 0));
    k<<<1, 1, 0, s2>>>(nullptr);
    if (!strcmp(variant, "joined")) { CK(cudaEventRecord(j, s2)); CK(cudaStreamWaitEvent(s1, j, 0)); }
    cudaError_t end = cudaStreamEndCapture(s1, &g);
    if (i == 0) printf("  end capture: %s\n", cudaGetErrorName(end));
    if (strcmp(variant, "joined")) { cudaStreamCaptureStatus st; cudaStreamIsCapturing(s2, &st); if (i == 0) printf("  s2 status after end: %d\n", (int)st); cudaGetLastError(); }
    if (g) cudaGraphDestroy(g);
    verbose = i == 0;
    CK(cudaEventRecord(e, s3));
    CK(cudaStreamWaitEvent(s3, e, 0));
    k<<<1, 1, 0, s2>>>(nullptr);
    cudaGetLastError();
  }
  cudaDeviceSynchronize();
  printf("sequential %s: no crash\n", variant);
}

enum class Lock { None, End, Turn };

// Thread A begins a capture on s1, issues a few kernels into it and ends it, over and over, each
// call under `turn` (as the library's turn serialises calls into a capture); thread B records its
// own event into A's capture on s1 (under `turn` too), then records it again on s2, outside the
// capture, under the lock `lock` names: none, `ends` (which A's end also holds), or `turn`.
static void race(Lock lock, int rounds) {
  verbose = false;
  cudaStream_t s1, s2; cudaStreamCreate(&s1); cudaStreamCreate(&s2);
  cudaEvent_t e; cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  std::mutex turn, ends;
  std::atomic<bool> capturing{false}, stop{false};
  std::atomic<long> in_capture{0}, outside{0};
  std::thread b([&] {
    while (!stop.load()) {
      { std::lock_guard<std::mutex> l(turn);
        if (capturing.load() && cudaEventRecord(e, s1) == cudaSuccess) in_capture++; }
      if (lock == Lock::End) { std::lock_guard<std::mutex> l(ends); cudaEventRecord(e, s2); }
      else if (lock == Lock::Turn) { std::lock_guard<std::mutex> l(turn); cudaEventRecord(e, s2); }
      else cudaEventRecord(e, s2);
      outside++;
    }
  });
  for (int i = 0; i < rounds; i++) {
    { std::lock_guard<std::mutex> l(turn);
      cudaStreamBeginCapture(s1, cudaStreamCaptureModeRelaxed);
      capturing = true; }
    for (int j = 0; j < 4; j++) {
      std::this_thread::yield();
      std::lock_guard<std::mutex> l(turn);
      k<<<1, 1, 0, s1>>>(nullptr);
    }
    cudaGraph_t g = nullptr;
    { std::lock_guard<std::mutex> l(turn); std::lock_guard<std::mutex> l2(ends);
      capturing = false; cudaStreamEndCapture(s1, &g); }
    if (g) cudaGraphDestroy(g);
  }
  stop = true; b.join(); cudaDeviceSynchronize();
  const char *name = lock == Lock::Turn ? "in the turn" : lock == Lock::End ? "apart from the end only" : "unserialised";
  printf("race (outside record %s): no crash in %d captures, %ld records in capture, %ld outside\n",
         name, rounds, in_capture.load(), outside.load());
}

int main(int argc, char **argv) {
  cudaFree(0);
  const char *what = argv[1];
  if (!strcmp(what, "joined") || !strcmp(what, "unjoined")) sequential(what);
  else if (!strcmp(what, "race-turn")) race(Lock::Turn, atoi(argv[2]));
  else if (!strcmp(what, "race-end")) race(Lock::End, atoi(argv[2]));
  else race(Lock::None, atoi(argv[2]));
  return 0;
}
