//! §7: the seed utilities of accel-graph-utils, checked on every backend: graphed callables
//! (PyTorch's `make_graphed_callables`), the full-iteration wrapper and its static buffer
//! loader (Megatron-Core's `FullCudaGraphWrapper`, `StaticBufferLoader`), the per-instance
//! shared capture stream and graph pool, and the bucketed graph cache (vLLM's capture sizes).
//!
//! Each check uses only the `Backend` API; results of replays are compared with eager runs
//! bit for bit.

pub(crate) mod bucketed;
pub(crate) mod full_graph;
pub(crate) mod graphed_callables;
pub(crate) mod shared_resources;

use accel_graph_api::{Backend, DeviceBuffer, GraphError};

use crate::check::CaseResult;

/// `Err(message())` unless `condition` holds.
fn ensure(condition: bool, message: impl FnOnce() -> String) -> CaseResult {
    if condition { Ok(()) } else { Err(message()) }
}

/// Deterministic pseudo-random data (a 64-bit LCG), exact in f32 (multiples of 1/64).
fn data(seed: u64, len: usize) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) % 512) as f32 / 64.0 - 4.0
        })
        .collect()
}

fn bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}

/// `got` and `want` are equal bit for bit.
fn same_bits(what: &str, got: &[f32], want: &[f32]) -> CaseResult {
    ensure(bits(got) == bits(want), || {
        format!("{what}: replay differs from eager: got {got:?}, eager gave {want:?}")
    })
}

/// `result` is an `ArgumentMismatch`; returns its message.
fn expect_argument_mismatch<T>(
    what: &str,
    result: Result<T, GraphError>,
) -> Result<String, String> {
    match result {
        Err(GraphError::ArgumentMismatch(message)) => Ok(message),
        Err(other) => Err(format!("{what}: expected ArgumentMismatch, got {other:?}")),
        Ok(_) => Err(format!("{what}: expected ArgumentMismatch, got success")),
    }
}

/// `y = a * x + c` into a new buffer: a small "layer" of portable ops.
fn affine<B: Backend>(
    b: &B,
    x: &B::Buffer<f32>,
    a: f32,
    c: f32,
) -> accel_graph_api::Result<B::Buffer<f32>> {
    let y = b.alloc(x.len())?;
    b.copy(&y, x)?;
    b.scale(&y, a)?;
    b.add_scalar(&y, c)?;
    Ok(y)
}

/// Two-input layer with a temporary: `t = x + 2w` (freed), `y = 0.5 t - 1` (returned).
fn layer<B: Backend>(
    b: &B,
    x: &B::Buffer<f32>,
    w: &B::Buffer<f32>,
) -> accel_graph_api::Result<B::Buffer<f32>> {
    let t = b.alloc(x.len())?;
    b.copy(&t, x)?;
    b.axpy(&t, 2.0, w)?;
    affine(b, &t, 0.5, -1.0)
}
