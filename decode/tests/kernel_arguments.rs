//! The cache kernels declare how long each buffer must be in terms of their sizes, so a size
//! that claims more than a buffer holds is refused before the launch (a typed
//! `GraphError::KernelArguments`) rather than sending a store past the buffer on a GPU.

use accel_graph::{
    Backend, GraphError, Result,
    kernel::{Kernel, KernelArg},
    mock::MockBackend,
};
use accel_graph_decode::model::kernels::Kernels;

const ROWS: u32 = 2;
const HEADS: u32 = 4;
const KV_HEADS: u32 = 2;
const HEAD_DIM: u32 = 8;
const MAX_LEN: u32 = 16;
const SLOTS: u32 = 3;

fn len(factors: &[u32]) -> usize {
    factors.iter().map(|&f| f as usize).product()
}

/// Launches `decode_rope_kv` with a key cache of `cache` elements and the sizes above but
/// `slots`: the result, and whether the cache was written.
fn rope_kv(b: &MockBackend, kernel: &Kernel, cache: usize, slots: u32) -> Result<bool> {
    let qkv_width = (HEADS + 2 * KV_HEADS) * HEAD_DIM;
    let q = b.alloc::<f32>(len(&[ROWS, HEADS, HEAD_DIM]))?;
    let k_cache = b.alloc::<f32>(cache)?;
    let v_cache = b.alloc::<f32>(len(&[SLOTS, KV_HEADS, MAX_LEN, HEAD_DIM]))?;
    let qkv = b.alloc::<f32>(len(&[ROWS, qkv_width]))?;
    b.upload(&qkv, &vec![1.0; len(&[ROWS, qkv_width])])?;
    let table = b.alloc::<f32>(len(&[MAX_LEN, HEAD_DIM]))?;
    b.upload(&table, &vec![1.0; len(&[MAX_LEN, HEAD_DIM])])?;
    // Token, position, length and slot of each row: both rows cached in the last slot.
    let meta = b.alloc::<u32>(4 * ROWS as usize)?;
    b.upload(&meta, &[0, 0, 5, 6, 6, 7, SLOTS - 1, SLOTS - 1])?;
    let u = |v: u32| KernelArg::scalar(v);
    b.launch_kernel(
        kernel,
        [ROWS * (HEADS + 2 * KV_HEADS), 1, 1],
        &[
            KernelArg::buffer(&q),
            KernelArg::buffer(&k_cache),
            KernelArg::buffer(&v_cache),
            KernelArg::buffer(&qkv),
            KernelArg::buffer(&table),
            KernelArg::buffer(&meta),
            u(ROWS),
            u(HEADS),
            u(KV_HEADS),
            u(HEAD_DIM),
            u(MAX_LEN),
            u(slots),
        ],
    )?;
    Ok(b.download(&k_cache)?.iter().any(|&v| v != 0.0))
}

#[test]
fn a_cache_shorter_than_its_sizes_is_refused_before_the_launch() -> Result<()> {
    let b = MockBackend::new();
    let kernel = &Kernels::get::<f32>().rope_kv;
    let full = len(&[SLOTS, KV_HEADS, MAX_LEN, HEAD_DIM]);
    assert!(
        rope_kv(&b, kernel, full, SLOTS)?,
        "the full cache is written"
    );
    // One element short of slots × kv_heads × max_len × head_dim.
    match rope_kv(&b, kernel, full - 1, SLOTS) {
        Err(GraphError::KernelArguments { kernel, message }) => {
            assert_eq!(kernel, "decode_rope_kv");
            assert!(message.contains("k_cache"), "{message}");
        }
        other => panic!("expected KernelArguments, got {other:?}"),
    }
    // A forged slot count: the cache holds SLOTS, the launch claims one more.
    assert!(matches!(
        rope_kv(&b, kernel, full, SLOTS + 1),
        Err(GraphError::KernelArguments { .. })
    ));
    Ok(())
}
