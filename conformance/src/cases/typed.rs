//! §13: typed buffers and views — any `Pod` element type, sub-ranges, pool-aware allocation
//! and keep-alive for all of them.

use accel_graph_api::{
    AcceleratorGraph, Backend, DeviceBuffer, Element, GraphError, GraphOptions,
    half::{bf16, f16},
};

use crate::{
    Case, Target,
    case::requirements::none,
    check::{CaseResult, Ctx, ensure, expect_err, new_graph, read, replay_on},
};

const TYPED: &str = "13 typed buffers and views";

/// The cases of §13, in running order.
pub(crate) fn cases<B: Backend>() -> Vec<Case<B>> {
    Vec::from([
        Case::new(
            "13.01 every element type round-trips exactly, odd lengths included",
            TYPED,
            none,
            round_trips,
        ),
        Case::new(
            "13.02 views: uploads, downloads and ops touch exactly their elements",
            TYPED,
            none,
            views_touch_their_elements,
        ),
        Case::new(
            "13.03 ops between two views of one buffer, eager and replayed, equal the host",
            TYPED,
            none,
            views_of_one_buffer,
        ),
        Case::new(
            "13.04 typed allocations in a capture come from its pool and are kept alive",
            TYPED,
            none,
            typed_pool_and_keep_alive,
        ),
        Case::new(
            "13.05 a view past its buffer and a length mismatch are typed errors",
            TYPED,
            none,
            range_errors,
        ),
    ])
}

/// A `#[repr(C)]` struct of the user's own: any `Pod` type is an element.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
struct Pair {
    id: u32,
    weight: f32,
}

/// Uploads `data` into a fresh buffer and reads it back, expecting the same bits, and checks
/// the buffer's length and bytes.
fn round_trip<B: Backend, T: Element + PartialEq>(b: &B, data: &[T]) -> CaseResult {
    let buf = b
        .alloc_from(data)
        .ctx(&format!("alloc_from::<{}>", T::type_name()))?;
    ensure!(
        buf.len() == data.len() && buf.num_bytes() == std::mem::size_of_val(data),
        "a buffer of {} {}: len {} and {} bytes",
        data.len(),
        T::type_name(),
        buf.len(),
        buf.num_bytes()
    );
    b.synchronize().ctx("synchronize")?;
    let back = b.download(&buf).ctx("download")?;
    ensure!(
        bytemuck::cast_slice::<T, u8>(&back) == bytemuck::cast_slice::<T, u8>(data),
        "{} round trip: uploaded {:?}, read back {:?}",
        T::type_name(),
        &data[..data.len().min(8)],
        &back[..back.len().min(8)]
    );
    Ok(())
}

/// 13.01: u8 (odd lengths, so not whole 4-byte words), i8, u16, i32, u32, i64, f64, f16,
/// bf16, f32 and a user struct upload and download bit for bit.
fn round_trips<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    for len in [0usize, 1, 3, 5, 1027] {
        let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
        round_trip(b, &bytes)?;
    }
    round_trip(b, &[-128i8, -1, 0, 1, 127])?;
    round_trip(b, &[0u16, 1, 0xffff, 0x1234, 7, 9, 11])?;
    round_trip(b, &[i32::MIN, -1, 0, 1, i32::MAX])?;
    round_trip(b, &[0u32, 0xdead_beef, u32::MAX])?;
    round_trip(b, &[i64::MIN, 42, i64::MAX])?;
    round_trip(b, &[f64::MIN_POSITIVE, -0.0, 1e300, std::f64::consts::PI])?;
    let halves: Vec<f16> = [0.5f32, -2.0, 65504.0, 1e-4, 3.0]
        .iter()
        .map(|&x| f16::from_f32(x))
        .collect();
    round_trip(b, &halves)?;
    let brains: Vec<bf16> = [0.5f32, -2.0, 1e30, 1e-30, 3.0]
        .iter()
        .map(|&x| bf16::from_f32(x))
        .collect();
    round_trip(b, &brains)?;
    round_trip(b, &[f32::NAN, f32::INFINITY, -0.0, 1.5])?;
    round_trip(
        b,
        &[
            Pair { id: 1, weight: 0.5 },
            Pair {
                id: 2,
                weight: -1.0,
            },
        ],
    )
}

/// 13.02: a view's upload changes only its bytes (u8 views at offsets that split 4-byte
/// words); a view's download reads only its elements; an op on an f32 view changes only the
/// view's elements, eagerly and replayed from a capture.
fn views_touch_their_elements<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    // Bytes: views that start and end inside words.
    let bytes = b.alloc_from(&[0xaau8; 11]).ctx("alloc_from::<u8>")?;
    b.upload(bytes.view(1..3).ctx("view")?, &[1, 2])
        .ctx("upload to 1..3")?;
    b.upload(bytes.view(6..9).ctx("view")?, &[6, 7, 8])
        .ctx("upload to 6..9")?;
    let got = b.download(&bytes).ctx("download")?;
    let want = [0xaa, 1, 2, 0xaa, 0xaa, 0xaa, 6, 7, 8, 0xaa, 0xaa];
    ensure!(
        got == want,
        "u8 views: buffer is {got:?}, expected {want:?}"
    );
    let middle = b
        .download(bytes.view(5..10).ctx("view")?)
        .ctx("download 5..10")?;
    ensure!(middle == want[5..10], "u8 view 5..10 reads {middle:?}");
    // f32: ops on views, eager.
    let x = b.alloc_from(&[1.0f32; 10]).ctx("alloc_from")?;
    b.fill(x.view(2..5).ctx("view")?, 7.0).ctx("fill 2..5")?;
    b.add_scalar(x.view(4..).ctx("view")?, 1.0)
        .ctx("add_scalar 4..")?;
    let want = [1.0, 1.0, 7.0, 7.0, 8.0, 2.0, 2.0, 2.0, 2.0, 2.0];
    let got = read(b, &x)?;
    ensure!(
        got == want,
        "eager ops on views: {got:?}, expected {want:?}"
    );
    // The same ops replayed from a capture, on a second buffer.
    let y = b.alloc_from(&[1.0f32; 10]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    b.capture_on(&stream, &mut g, || {
        b.fill(y.view(2..5)?, 7.0)?;
        b.add_scalar(y.view(4..)?, 1.0)
    })
    .ctx("capture of ops on views")?;
    ensure!(read(b, &y)? == [1.0; 10], "capturing ops on views ran them");
    replay_on(b, &stream, &mut g)?;
    let got = read(b, &y)?;
    ensure!(
        got == want,
        "replayed ops on views: {got:?}, expected {want:?}"
    );
    Ok(())
}

/// 13.03: `copy`, `axpy` and `mul` between two disjoint views of one buffer (the operands
/// share memory, which some devices bind specially), eager and replayed, equal the host.
fn views_of_one_buffer<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let start: Vec<f32> = (0..12).map(|i| i as f32 + 0.5).collect();
    let host = |mut v: Vec<f32>| {
        for i in 0..4 {
            v[8 + i] = v[i]; // copy 8..12 <- 0..4
        }
        for i in 0..4 {
            let product = 0.25 * v[8 + i];
            v[4 + i] += product; // axpy 4..8 += 0.25 * 8..12
        }
        for i in 0..4 {
            v[i] *= v[4 + i]; // mul 0..4 *= 4..8
        }
        v
    };
    let want = host(start.clone());
    let run = |x: &B::Buffer<f32>| -> Result<(), GraphError> {
        b.copy(x.view(8..12)?, x.view(0..4)?)?;
        b.axpy(x.view(4..8)?, 0.25, x.view(8..12)?)?;
        b.mul(x.view(0..4)?, x.view(4..8)?)
    };
    let x = b.alloc_from(&start).ctx("alloc_from")?;
    run(&x).ctx("eager ops between views")?;
    let got = read(b, &x)?;
    ensure!(
        got == want,
        "eager ops between views of one buffer: {got:?}, expected {want:?}"
    );
    let y = b.alloc_from(&start).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    b.capture_on(&stream, &mut g, || run(&y))
        .ctx("capture of ops between views")?;
    replay_on(b, &stream, &mut g)?;
    let got = read(b, &y)?;
    ensure!(
        got == want,
        "replayed ops between views of one buffer: {got:?}, expected {want:?}"
    );
    Ok(())
}

/// 13.04: buffers of u8 and bf16 allocated inside a capture come from the graph's pool; an
/// op captured on a view of an f32 buffer keeps the whole buffer's memory after the buffer is
/// dropped, so replays still write it (and nothing is freed under the graph).
fn typed_pool_and_keep_alive<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    let x = b.alloc_from(&[0.0f32; 64]).ctx("alloc_from")?;
    let before = b.memory_stats();
    let (bytes, halves) = b
        .capture_on(&stream, &mut g, || {
            let bytes = b.alloc::<u8>(7)?;
            let halves = b.alloc::<bf16>(33)?;
            b.add_scalar(x.view(16..32)?, 1.0)?;
            Ok((bytes, halves))
        })
        .ctx("capture with typed allocations")?;
    let pool = g.pool().ctx("pool")?;
    ensure!(
        bytes.num_bytes() == 7 && halves.num_bytes() == 66,
        "typed buffers hold {} and {} bytes, expected 7 and 66",
        bytes.num_bytes(),
        halves.num_bytes()
    );
    let stats = b.memory_stats();
    let pooled = stats.pool(pool).map_or(0, |p| p.active_bytes);
    ensure!(
        pooled >= 7 + 66 && stats.pool_reserved_bytes > before.pool_reserved_bytes,
        "u8 and bf16 buffers allocated in the capture are not in its pool {pool}: \
         {pooled} active bytes there"
    );
    drop((bytes, halves));
    let address = x.device_address();
    drop(x);
    ensure!(
        b.memory_snapshot().iter().any(|blk| blk.address == address),
        "the buffer under a captured view was freed while its graph holds it"
    );
    for _ in 0..3 {
        replay_on(b, &stream, &mut g)?;
    }
    b.synchronize().ctx("synchronize")?;
    g.reset();
    ensure!(
        b.memory_snapshot().iter().all(|blk| blk.address != address),
        "the buffer under a captured view outlived its graph's reset"
    );
    Ok(())
}

/// 13.05: views past the end are `ViewOutOfRange`; uploads and downloads of the wrong length
/// are `LengthMismatch`; ops on views of different lengths are `LengthMismatch`.
fn range_errors<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0u32; 8]).ctx("alloc_from::<u32>")?;
    expect_err!(
        x.view(4..9),
        GraphError::ViewOutOfRange { .. },
        "view 4..9 of 8"
    );
    // A start past the end, as computed offsets can give.
    let (start, end) = (5, 4);
    expect_err!(
        x.view(start..end),
        GraphError::ViewOutOfRange { .. },
        "view 5..4"
    );
    let v = x.view(2..6).ctx("view 2..6")?;
    expect_err!(
        v.view(1..5),
        GraphError::ViewOutOfRange { .. },
        "view 1..5 of a 4-view"
    );
    expect_err!(
        b.upload(v, &[1, 2, 3]),
        GraphError::LengthMismatch { .. },
        "upload of 3 into a view of 4"
    );
    let mut short = [0u32; 3];
    expect_err!(
        b.download_into(v, &mut short),
        GraphError::LengthMismatch { .. },
        "download of a view of 4 into 3"
    );
    let y = b.alloc_from(&[0.0f32; 8]).ctx("alloc_from")?;
    expect_err!(
        b.copy(y.view(0..3).ctx("view")?, y.view(4..8).ctx("view")?),
        GraphError::LengthMismatch { .. },
        "copy of 4 elements into 3"
    );
    ensure!(
        b.download(&x).ctx("download")? == [0; 8],
        "refused calls changed the buffer"
    );
    Ok(())
}
