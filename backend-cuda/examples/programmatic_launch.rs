//! Whether kernels marked [`Kernel::programmatic_dependent_launch`] really overlap the kernel
//! before them on this device, and that the wait makes the overlap safe. A slow kernel (its
//! first block spins before it writes) lets its dependents launch at once; then a marked
//! reader of its output runs, in two versions:
//!
//! * skipping `accel_graph_grid_wait()` (a scalar says so) — breaking the contract on purpose:
//!   where the launches overlap it reads elements before the slow kernel wrote them;
//! * waiting — it must read every element written.
//!
//! Prints `programmatic_launch:` lines and exits with status 1 if the waiting reader read
//! anything unwritten, or if the overlap was expected (compute capability 9.0 or later, the
//! environment not turning it off with `ACCEL_GRAPH_CUDA_PROGRAMMATIC_LAUNCH=0`) and not seen;
//! a device without it is reported and the run exits with status 0.
//!
//! Run: `cargo run --release -p accel-graph-cuda --example programmatic_launch` (needs an
//! NVIDIA GPU and NVRTC on the loader path).

use std::{error::Error, process::ExitCode};

use accel_graph_api::{
    kernel::{Access, CUDA_GRID_DEPENDENCY, Kernel, KernelArg},
    prelude::*,
};
use accel_graph_cuda::{CudaBackend, PROGRAMMATIC_LAUNCH_ENV};

type Outcome<T> = Result<T, Box<dyn Error>>;

const N: usize = 1 << 16;
const ROUNDS: usize = 20;
/// Cycles the slow kernel's first block spins: ~100 µs at 2 GHz.
const SPIN: u32 = 200_000;

fn slow_fill() -> Kernel {
    Kernel::new("pdl_slow_fill")
        .buffer::<f32>("y", Access::Write)
        .scalar::<f32>("value")
        .scalar::<u32>("spin")
        .scalar::<u32>("n")
        .cuda(format!(
            "{CUDA_GRID_DEPENDENCY}{}",
            r#"
extern "C" __global__ void pdl_slow_fill(float* y, float value, unsigned spin, unsigned n) {
    accel_graph_grid_wait();
    accel_graph_launch_dependents();
    if (blockIdx.x == 0u) {
        long long t0 = clock64();
        while (clock64() - t0 < (long long)spin) {}
    }
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = value;
}"#
        ))
        .programmatic_dependent_launch(true)
}

/// `out[i] = y[i]`, waiting for the kernel before it where `wait` is not 0 (a kernel whose
/// source never waited would be refused when marked: `kernel::check_grid_dependency`).
fn reader() -> Kernel {
    Kernel::new("pdl_read")
        .buffer::<f32>("out", Access::Write)
        .buffer::<f32>("y", Access::Read)
        .scalar::<u32>("wait")
        .scalar::<u32>("n")
        .cuda(format!(
            "{CUDA_GRID_DEPENDENCY}{}",
            r#"
extern "C" __global__ void pdl_read(float* out, const float* y, unsigned wait, unsigned n) {
    if (wait != 0u) accel_graph_grid_wait();
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = y[i];
}"#
        ))
        .programmatic_dependent_launch(true)
}

/// Elements of `out` the reader (waiting with `wait`) copied before the slow kernel wrote
/// them, over [`ROUNDS`] rounds (each writes a new value).
fn unwritten_reads(b: &CudaBackend, wait: bool) -> Outcome<usize> {
    let (fill, read) = (slow_fill(), reader());
    let y = b.alloc_from(&vec![0.0f32; N])?;
    let out = b.alloc::<f32>(N)?;
    let mut stale = 0;
    for round in 1..=ROUNDS {
        let value = round as f32;
        let n = KernelArg::scalar(N as u32);
        b.launch_kernel(
            &fill,
            fill.grid_for(N),
            &[
                KernelArg::buffer(&y),
                KernelArg::scalar(value),
                KernelArg::scalar(SPIN),
                n,
            ],
        )?;
        b.launch_kernel(
            &read,
            read.grid_for(N),
            &[
                KernelArg::buffer(&out),
                KernelArg::buffer(&y),
                KernelArg::scalar(u32::from(wait)),
                n,
            ],
        )?;
        stale += b.download(&out)?.iter().filter(|&&v| v != value).count();
    }
    Ok(stale)
}

fn run() -> Outcome<bool> {
    let b = CudaBackend::new(0)?;
    let (major, minor) = b.driver().compute_capability();
    let off = std::env::var(PROGRAMMATIC_LAUNCH_ENV).is_ok_and(|v| v.trim() == "0");
    let expected = major >= 9 && !off;
    println!(
        "programmatic_launch: device sm_{major}{minor}; overlap {}",
        if expected {
            "expected"
        } else if off {
            "turned off by the environment"
        } else {
            "not available (compute capability below 9.0)"
        }
    );
    let racing = unwritten_reads(&b, false)?;
    let waiting = unwritten_reads(&b, true)?;
    let total = N * ROUNDS;
    println!(
        "programmatic_launch: a reader without the wait read {racing} of {total} elements \
         before they were written; with the wait {waiting}"
    );
    let mut ok = waiting == 0;
    if !ok {
        println!("programmatic_launch: FAIL: the waiting reader read unwritten elements");
    }
    if expected && racing == 0 {
        println!("programmatic_launch: FAIL: the launches never overlapped");
        ok = false;
    }
    if !expected && racing != 0 {
        println!("programmatic_launch: FAIL: launches overlapped where they must not");
        ok = false;
    }
    if ok {
        println!("programmatic_launch: PASS");
    }
    Ok(ok)
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            println!("programmatic_launch: error: {e}");
            ExitCode::FAILURE
        }
    }
}
