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
    rope_kv_short_qkv(b, kernel, cache, slots, 0)
}

/// [`rope_kv`] with the projection's output `short` elements shorter than its sizes say.
fn rope_kv_short_qkv(
    b: &MockBackend,
    kernel: &Kernel,
    cache: usize,
    slots: u32,
    short: usize,
) -> Result<bool> {
    let qkv_width = (HEADS + 2 * KV_HEADS) * HEAD_DIM;
    let q = b.alloc::<f32>(len(&[ROWS, HEADS, HEAD_DIM]))?;
    let k_cache = b.alloc::<f32>(cache)?;
    let v_cache = b.alloc::<f32>(len(&[SLOTS, KV_HEADS, MAX_LEN, HEAD_DIM]))?;
    let qkv = b.alloc::<f32>(len(&[ROWS, qkv_width]) - short)?;
    b.upload(&qkv, &vec![1.0; len(&[ROWS, qkv_width]) - short])?;
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
    refused(
        rope_kv(&b, kernel, full - 1, SLOTS).map(drop),
        "decode_rope_kv",
        "k_cache",
    );
    // A forged slot count: the cache holds SLOTS, the launch claims one more.
    assert!(matches!(
        rope_kv(&b, kernel, full, SLOTS + 1),
        Err(GraphError::KernelArguments { .. })
    ));
    Ok(())
}

/// Expects `result` to be the typed refusal of `kernel`, naming `buffer`.
fn refused(result: Result<()>, kernel: &str, buffer: &str) {
    match result {
        Err(GraphError::KernelArguments { kernel: k, message }) => {
            assert_eq!(k, kernel);
            assert!(message.contains(buffer), "{message}");
        }
        other => panic!("{kernel}: expected KernelArguments naming {buffer}, got {other:?}"),
    }
}

#[test]
fn packed_buffers_shorter_than_their_sizes_are_refused() -> Result<()> {
    let b = MockBackend::new();
    let kernels = Kernels::get::<f32>();
    let cache = len(&[SLOTS, KV_HEADS, MAX_LEN, HEAD_DIM]);
    // Queries, keys and values side by side: rows × (heads + 2 × kv_heads) × head_dim.
    assert!(rope_kv_short_qkv(&b, &kernels.rope_kv, cache, SLOTS, 0)?);
    refused(
        rope_kv_short_qkv(&b, &kernels.rope_kv, cache, SLOTS, 1).map(drop),
        "decode_rope_kv",
        "qkv",
    );
    // Gate and up side by side: rows × 2 × inter.
    let inter = 6u32;
    let act = b.alloc::<f32>(len(&[ROWS, inter]))?;
    let swiglu = |gate_up_len: usize| -> Result<()> {
        let gate_up = b.alloc::<f32>(gate_up_len)?;
        b.launch_kernel(
            &kernels.swiglu,
            [1, 1, 1],
            &[
                KernelArg::buffer(&act),
                KernelArg::buffer(&gate_up),
                KernelArg::scalar(ROWS),
                KernelArg::scalar(inter),
            ],
        )
    };
    swiglu(len(&[ROWS, 2, inter]))?;
    refused(
        swiglu(len(&[ROWS, 2, inter]) - 1),
        "decode_swiglu",
        "gate_up",
    );
    // The chunks' partials: rows × heads × splits × (head_dim + 2).
    let splits = 3u32;
    let partials_len = len(&[ROWS, HEADS, splits, HEAD_DIM + 2]);
    let out = b.alloc::<f32>(len(&[ROWS, HEADS, HEAD_DIM]))?;
    let combine = |partials_len: usize| -> Result<()> {
        let partials = b.alloc::<f32>(partials_len)?;
        b.launch_kernel(
            &kernels.attention_combine,
            [HEADS, ROWS, 1],
            &[
                KernelArg::buffer(&out),
                KernelArg::buffer(&partials),
                KernelArg::scalar(ROWS),
                KernelArg::scalar(HEADS),
                KernelArg::scalar(HEAD_DIM),
                KernelArg::scalar(splits),
            ],
        )
    };
    combine(partials_len)?;
    refused(
        combine(partials_len - 1),
        "decode_attention_combine",
        "partials",
    );
    let split = |partials_len: usize| -> Result<()> {
        let partials = b.alloc::<f32>(partials_len)?;
        let q = b.alloc::<f32>(len(&[ROWS, HEADS, HEAD_DIM]))?;
        let k_cache = b.alloc::<f32>(cache)?;
        let meta = b.alloc_from(&[0u32, 0, 5, 6, 6, 7, 0, 1])?;
        let u = |v: u32| KernelArg::scalar(v);
        b.launch_kernel(
            &kernels.attention_split,
            [HEADS, ROWS, splits],
            &[
                KernelArg::buffer(&partials),
                KernelArg::buffer(&q),
                KernelArg::buffer(&k_cache),
                KernelArg::buffer(&k_cache),
                KernelArg::buffer(&meta),
                u(ROWS),
                u(HEADS),
                u(KV_HEADS),
                u(HEAD_DIM),
                u(MAX_LEN),
                u(SLOTS),
                KernelArg::scalar(0.5f32),
                u(3),
                u(splits),
            ],
        )
    };
    split(partials_len)?;
    refused(
        split(partials_len - 1),
        "decode_attention_split",
        "partials",
    );
    Ok(())
}
