//! The collective cases (conformance §17) on CUDA, one rank per GPU (rank `r` on device `r`),
//! ranks as threads, for worlds of 1, 2, 4 and 8 ranks. A world larger than the machine's GPUs
//! is skipped with the reason, as is every case without a GPU, without NCCL, or in a build
//! without the `nccl` feature.

use accel_graph_cuda::CudaBackend;

accel_graph_conformance::collectives_main!(CudaBackend::new, [1, 2, 4, 8]);
