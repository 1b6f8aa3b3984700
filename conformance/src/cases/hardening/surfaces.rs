//! 10.13–10.18: the surfaces beyond PyTorch's graph API — events across streams, users'
//! kernels, views, GEMM and conditional bodies — attacked as a hostile caller would: a
//! capture whose forks failed still ends, arguments that misstate their memory are checked
//! against it, overlapping operands and aliasing writes are refused instead of giving an
//! answer that depends on the device's thread order, and a body cannot end its enclosing
//! capture.

use std::{
    sync::{LazyLock, mpsc},
    time::Duration,
};

use accel_graph_api::{
    AcceleratorGraph, Backend, DeviceBuffer, Gemm, GraphError, GraphOptions, GraphState, View,
    kernel::{Access, Kernel, KernelArg},
};

use crate::{
    Target,
    check::{CaseResult, Ctx, ensure, expect_all, expect_err, new_graph, on_stream, read},
};

/// How long a call that used to hang may take before the case reports it hung.
const HANG_BOUND: Duration = Duration::from_secs(20);

/// Runs `body` on a thread of its own and waits at most [`HANG_BOUND`] for it: a call that
/// never returns fails the case (its thread is left behind) instead of stalling the suite.
fn within_bound(what: &str, body: impl FnOnce() -> CaseResult + Send + 'static) -> CaseResult {
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(body());
    });
    match finished.recv_timeout(HANG_BOUND) {
        Ok(result) => result,
        Err(mpsc::RecvTimeoutError::Timeout) => Err(format!(
            "{what}: no answer within {} s (a hang)",
            HANG_BOUND.as_secs()
        )),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(format!("{what}: the thread panicked")),
    }
}

/// 10.13: a capture on `s1` records event `e`, then is invalidated (it waits on an event
/// recorded eagerly on another stream); `s2` then waits on `e` twice — each wait fails,
/// since the capture it would fork into is invalid. `capture_end` still returns (with
/// `CaptureInvalidated`), within a bound, leaves no stream capturing, and the graph captures
/// again after `reset`.
pub(super) fn failed_forks_leave_the_end_free<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend().clone();
    within_bound("capture_end after two failed forks", move || {
        let (s1, s2, s3) = (
            b.new_stream().ctx("new_stream")?,
            b.new_stream().ctx("new_stream")?,
            b.new_stream().ctx("new_stream")?,
        );
        let (e, eager) = (
            b.new_event().ctx("new_event")?,
            b.new_event().ctx("new_event")?,
        );
        let x = b.alloc_from(&[0.0f32; 16]).ctx("alloc_from")?;
        {
            let _s3 = on_stream(&b, &s3)?;
            b.add_scalar(&x, 1.0).ctx("eager add on s3")?;
            b.record_event(&eager).ctx("eager record on s3")?;
            b.synchronize().ctx("synchronize")?;
        }
        let mut g = new_graph(&b, GraphOptions::new())?;
        {
            let _s1 = on_stream(&b, &s1)?;
            g.capture_begin().ctx("capture_begin on s1")?;
            b.add_scalar(&x, 1.0).ctx("captured add")?;
            b.record_event(&e).ctx("record e in the capture")?;
            // Waiting on eager work invalidates the capture (or is refused and invalidates
            // it): either way the capture can no longer end into a graph.
            let _ = b.wait_event(&eager);
        }
        {
            let _s2 = on_stream(&b, &s2)?;
            for attempt in ["first", "second"] {
                let waited = b.wait_event(&e);
                ensure!(
                    waited.is_err(),
                    "the {attempt} wait on an event of an invalidated capture returned Ok"
                );
            }
            ensure!(
                !b.is_capturing(&s2).ctx("is_capturing(s2)")?,
                "s2 is left capturing after its forks failed"
            );
        }
        {
            let _s1 = on_stream(&b, &s1)?;
            expect_err!(
                g.capture_end(),
                GraphError::CaptureInvalidated { .. },
                "capture_end of the invalidated capture"
            );
        }
        for (name, s) in [("s1", &s1), ("s2", &s2), ("s3", &s3)] {
            ensure!(
                !b.is_capturing(s).ctx("is_capturing")?,
                "{name} is left capturing after capture_end"
            );
        }
        g.reset();
        b.capture_on(&s1, &mut g, || b.add_scalar(&x, 1.0))
            .ctx("capture again after reset")?;
        {
            let _s1 = on_stream(&b, &s1)?;
            g.replay().ctx("replay")?;
        }
        expect_all(&b, &x, 2.0, "eager add + one replay")
    })
}

/// A buffer that misstates its length (and, with `U`, its element type) but names the memory
/// of a real buffer: what a caller outside the library can build, since [`DeviceBuffer`] is a
/// public trait. Arguments made from it must be checked against the memory itself.
struct Misstated<'a, B: Backend, U> {
    real: &'a B::Buffer<f32>,
    claimed_len: usize,
    element: std::marker::PhantomData<fn() -> U>,
}

impl<B: Backend, U> std::fmt::Debug for Misstated<'_, B, U> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Misstated({} elements claimed)", self.claimed_len)
    }
}

impl<B: Backend, U: accel_graph_api::Element> DeviceBuffer for Misstated<'_, B, U> {
    type Element = U;
    fn len(&self) -> usize {
        self.claimed_len
    }
    fn device_address(&self) -> u64 {
        self.real.device_address()
    }
    fn instance_id(&self) -> u64 {
        self.real.instance_id()
    }
}

impl<B: Backend, U> AsRef<B::Memory> for Misstated<'_, B, U> {
    fn as_ref(&self) -> &B::Memory {
        self.real.as_ref()
    }
}

/// `x[i] += 1` for `i < n`, over any length (no extent: the length checks are the library's).
static BUMP: LazyLock<Kernel> = LazyLock::new(|| {
    Kernel::new("ag_bump")
        .buffer::<f32>("x", Access::ReadWrite)
        .scalar::<u32>("n")
        .cuda(
            r#"extern "C" __global__ void ag_bump(float* x, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}"#,
        )
        .wgsl(
            r#"struct Scalars { n: u32 }
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<uniform> s: Scalars;
@compute @workgroup_size(256)
fn ag_bump(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < s.n) { x[id.x] = x[id.x] + 1.0; }
}"#,
        )
        .host(|args, _| {
            let [x, n] = args else {
                unreachable!("two parameters")
            };
            let n = n.scalar::<u32>() as usize;
            let x = x.slice_mut::<f32>();
            let n = n.min(x.len());
            x[..n].iter_mut().for_each(|v| *v += 1.0);
        })
});

/// `x[i] += 1` through the u32 view of the same bits (a kernel of another element type).
static BUMP_WORDS: LazyLock<Kernel> = LazyLock::new(|| {
    Kernel::new("ag_bump_words")
        .buffer::<u32>("x", Access::ReadWrite)
        .scalar::<u32>("n")
        .cuda(
            r#"extern "C" __global__ void ag_bump_words(unsigned* x, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1u;
}"#,
        )
        .wgsl(
            r#"struct Scalars { n: u32 }
@group(0) @binding(0) var<storage, read_write> x: array<u32>;
@group(0) @binding(1) var<uniform> s: Scalars;
@compute @workgroup_size(256)
fn ag_bump_words(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < s.n) { x[id.x] = x[id.x] + 1u; }
}"#,
        )
        .host(|args, _| {
            let [x, n] = args else {
                unreachable!("two parameters")
            };
            let n = n.scalar::<u32>() as usize;
            let x = x.slice_mut::<u32>();
            let n = n.min(x.len());
            x[..n].iter_mut().for_each(|v| *v = v.wrapping_add(1));
        })
});

/// 10.14: kernel arguments made from a buffer that misstates its length (a million elements
/// over 4, views at offsets 4, 1000 and `usize::MAX - 1`) or its element type are refused at
/// launch and in `update_node`, with nothing written; so is another instance's buffer where
/// one can be opened.
pub(super) fn misstated_buffers_are_checked<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0.0f32; 4]).ctx("alloc_from")?;
    let long = Misstated::<B, f32> {
        real: &x,
        claimed_len: usize::MAX,
        element: std::marker::PhantomData,
    };
    let views = [
        (0, 1_000_000, "a million elements over 4"),
        (4, 4, "4 elements at offset 4"),
        (1000, 4, "4 elements at offset 1000"),
        (usize::MAX - 5, 4, "4 elements at offset usize::MAX - 5"),
    ];
    for (offset, len, what) in views {
        let view = View::new(&long, offset..offset + len).ctx(what)?;
        let error = b.launch_kernel(
            &BUMP,
            BUMP.grid_for(len.min(4)),
            &[KernelArg::buffer(view), KernelArg::scalar(4u32)],
        );
        ensure!(
            matches!(error, Err(GraphError::ViewOutOfRange { .. })),
            "a launch on {what}: expected Err(ViewOutOfRange), got {error:?}"
        );
    }
    let words = Misstated::<B, u32> {
        real: &x,
        claimed_len: 4,
        element: std::marker::PhantomData,
    };
    let error = b.launch_kernel(
        &BUMP_WORDS,
        BUMP_WORDS.grid_for(4),
        &[KernelArg::buffer(&words), KernelArg::scalar(4u32)],
    );
    ensure!(
        error.is_err(),
        "a launch on f32 memory passed off as u32 elements returned Ok"
    );
    expect_all(b, &x, 0.0, "after the refused launches")?;

    // The same views in a node update.
    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    let node = b
        .capture_on(&stream, &mut g, || {
            b.launch_kernel(
                &BUMP,
                BUMP.grid_for(4),
                &[KernelArg::buffer(&x), KernelArg::scalar(4u32)],
            )?;
            b.captured_node()
        })
        .ctx("capture of one launch")?;
    for (offset, len, what) in [
        (4, 4, "4 elements at offset 4"),
        (1000, 4, "4 elements at offset 1000"),
        (usize::MAX - 5, 4, "4 elements at offset usize::MAX - 5"),
    ] {
        let view = View::new(&long, offset..offset + len).ctx(what)?;
        let updated = b.update_node(&mut g, node, &[(0, KernelArg::buffer(view))]);
        ensure!(
            updated.is_err(),
            "update_node to {what} of a 4-element buffer returned Ok"
        );
    }
    {
        let _s = on_stream(b, &stream)?;
        g.replay().ctx("replay after the refused updates")?;
    }
    b.synchronize().ctx("synchronize")?;
    expect_all(b, &x, 1.0, "one replay of the launch as captured")?;

    if t.can_open_another() {
        let other = t.another_instance()?;
        let theirs = other
            .alloc_from(&[0.0f32; 4])
            .ctx("alloc on the other instance")?;
        expect_err!(
            b.launch_kernel(
                &BUMP,
                BUMP.grid_for(4),
                &[KernelArg::buffer(&theirs), KernelArg::scalar(4u32)],
            ),
            GraphError::ForeignObject { .. },
            "a launch on another instance's buffer"
        );
        expect_all(&other, &theirs, 0.0, "the other instance's buffer")?;
    }
    Ok(())
}

/// 10.15: two operands of an op that overlap in part (`copy(x[1..8], x[0..7])`, `axpy`,
/// `mul`) are `OverlappingOperands` and change nothing, eagerly and in a capture (which goes
/// on); the same view twice is the op in place; disjoint views of one buffer work.
pub(super) fn overlapping_operands<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b
        .alloc_from(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
        .ctx("alloc_from")?;
    let before = read(b, &x)?;
    let (head, tail) = (x.view(0..7).ctx("view")?, x.view(1..8).ctx("view")?);
    let refused = |when: &str| -> CaseResult {
        expect_err!(
            b.copy(tail, head),
            GraphError::OverlappingOperands { op: "copy", .. },
            format!("copy(x[1..8], x[0..7]) {when}")
        );
        expect_err!(
            b.axpy(head, 2.0, tail),
            GraphError::OverlappingOperands { op: "axpy", .. },
            format!("axpy(x[0..7], 2, x[1..8]) {when}")
        );
        expect_err!(
            b.mul(tail, head),
            GraphError::OverlappingOperands { op: "mul", .. },
            format!("mul(x[1..8], x[0..7]) {when}")
        );
        Ok(())
    };
    refused("eagerly")?;
    ensure!(
        read(b, &x)? == before,
        "refused ops changed the buffer: {:?}",
        read(b, &x)?
    );
    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    b.capture_on(&stream, &mut g, || {
        refused("in a capture").map_err(GraphError::ArgumentMismatch)?;
        b.add_scalar(&x, 1.0)
    })
    .ctx("a capture whose overlapping ops were refused")?;
    {
        let _s = on_stream(b, &stream)?;
        g.replay().ctx("replay")?;
    }
    b.synchronize().ctx("synchronize")?;
    // In place: x = x * x, then disjoint halves: x[0..4] += 1 * x[4..8].
    b.mul(&x, &x).ctx("mul(x, x)")?;
    b.axpy(x.view(0..4).ctx("view")?, 1.0, x.view(4..8).ctx("view")?)
        .ctx("axpy on disjoint halves")?;
    let want: Vec<f32> = {
        let sq: Vec<f32> = before.iter().map(|v| (v + 1.0) * (v + 1.0)).collect();
        (0..8)
            .map(|i| if i < 4 { sq[i] + sq[i + 4] } else { sq[i] })
            .collect()
    };
    let got = read(b, &x)?;
    ensure!(
        got == want,
        "in place and disjoint ops: got {got:?}, want {want:?}"
    );
    Ok(())
}

/// 10.16: GEMM whose `C` is `A`, is `B`, or overlaps `A` in one buffer is
/// `OverlappingOperands`, with `C` unchanged.
pub(super) fn gemm_output_aliasing<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let spec = Gemm::new(4, 4, 4);
    let a = b.alloc_from(&[1.0f32; 16]).ctx("alloc_from")?;
    let m = b.alloc_from(&[2.0f32; 16]).ctx("alloc_from")?;
    let arena = b.alloc_from(&[3.0f32; 24]).ctx("alloc_from")?;
    expect_err!(
        b.gemm(&spec, &a, &m, &a),
        GraphError::OverlappingOperands { op: "gemm", .. },
        "gemm with C = A"
    );
    expect_err!(
        b.gemm(&spec, &a, &m, &m),
        GraphError::OverlappingOperands { op: "gemm", .. },
        "gemm with C = B"
    );
    expect_err!(
        b.gemm(
            &spec,
            arena.view(0..16).ctx("view")?,
            &m,
            arena.view(8..24).ctx("view")?
        ),
        GraphError::OverlappingOperands { op: "gemm", .. },
        "gemm with C overlapping A"
    );
    expect_all(b, &a, 1.0, "A after the refused gemms")?;
    expect_all(b, &m, 2.0, "B after the refused gemms")?;
    expect_all(b, &arena, 3.0, "the arena after the refused gemm")?;
    Ok(())
}

/// `a[i] += 1; b[i] += 1` for `i < n`: two written parameters.
static BUMP_BOTH: LazyLock<Kernel> = LazyLock::new(|| {
    Kernel::new("ag_bump_both")
        .buffer::<f32>("a", Access::ReadWrite)
        .buffer::<f32>("b", Access::ReadWrite)
        .scalar::<u32>("n")
        .cuda(
            r#"extern "C" __global__ void ag_bump_both(float* a, float* b, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { a[i] += 1.0f; b[i] += 1.0f; }
}"#,
        )
        .wgsl(
            r#"struct Scalars { n: u32 }
@group(0) @binding(0) var<storage, read_write> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> b: array<f32>;
@group(0) @binding(2) var<uniform> s: Scalars;
@compute @workgroup_size(256)
fn ag_bump_both(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < s.n) { a[id.x] = a[id.x] + 1.0; b[id.x] = b[id.x] + 1.0; }
}"#,
        )
        .host(|args, _| {
            let [a, b, n] = args else {
                unreachable!("three parameters")
            };
            let n = n.scalar::<u32>() as usize;
            for x in [a, b] {
                let x = x.slice_mut::<f32>();
                let n = n.min(x.len());
                x[..n].iter_mut().for_each(|v| *v += 1.0);
            }
        })
});

/// 10.17: one buffer bound to two written parameters of a kernel (the same view, or views
/// sharing elements) is `KernelArguments` on every backend, eagerly and in a node update;
/// disjoint views of one buffer are accepted (at 256-byte offsets, which every backend binds).
pub(super) fn aliasing_kernel_writes<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0.0f32; 128]).ctx("alloc_from")?;
    let y = b.alloc_from(&[0.0f32; 128]).ctx("alloc_from")?;
    let n = KernelArg::scalar(64u32);
    let grid = BUMP_BOTH.grid_for(64);
    expect_err!(
        b.launch_kernel(
            &BUMP_BOTH,
            grid,
            &[KernelArg::buffer(&x), KernelArg::buffer(&x), n]
        ),
        GraphError::KernelArguments { .. },
        "one buffer for two written parameters"
    );
    expect_err!(
        b.launch_kernel(
            &BUMP_BOTH,
            grid,
            &[
                KernelArg::buffer(x.view(0..64).ctx("view")?),
                KernelArg::buffer(x.view(32..96).ctx("view")?),
                n
            ]
        ),
        GraphError::KernelArguments { .. },
        "overlapping views for two written parameters"
    );
    expect_all(b, &x, 0.0, "after the refused launches")?;
    b.launch_kernel(
        &BUMP_BOTH,
        grid,
        &[
            KernelArg::buffer(x.view(0..64).ctx("view")?),
            KernelArg::buffer(x.view(64..128).ctx("view")?),
            n,
        ],
    )
    .ctx("disjoint halves of one buffer")?;
    expect_all(b, &x, 1.0, "both halves bumped once")?;

    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    let node = b
        .capture_on(&stream, &mut g, || {
            b.launch_kernel(
                &BUMP_BOTH,
                grid,
                &[
                    KernelArg::buffer(x.view(0..64)?),
                    KernelArg::buffer(y.view(0..64)?),
                    n,
                ],
            )?;
            b.captured_node()
        })
        .ctx("capture of one launch")?;
    let updated = b.update_node(
        &mut g,
        node,
        &[(1, KernelArg::buffer(x.view(0..64).ctx("view")?))],
    );
    ensure!(
        updated.is_err(),
        "update_node binding the written x to the second written parameter returned Ok"
    );
    {
        let _s = on_stream(b, &stream)?;
        g.replay().ctx("replay after the refused update")?;
    }
    b.synchronize().ctx("synchronize")?;
    let got = read(b, &x)?;
    ensure!(
        got[..64].iter().all(|&v| v == 2.0) && got[64..].iter().all(|&v| v == 1.0),
        "x after one replay: {:?}",
        &got[..8]
    );
    let got = read(b, &y)?;
    ensure!(
        got[..64].iter().all(|&v| v == 1.0) && got[64..].iter().all(|&v| v == 0.0),
        "y after one replay: {:?}",
        &got[..8]
    );
    Ok(())
}

/// 10.18: `capture_end` called inside a conditional node's body (with the capture's stream
/// made current again) is refused and invalidates the enclosing capture: its own end reports
/// `CaptureInvalidated`, nothing is left capturing, and nothing ran.
pub(super) fn capture_end_inside_a_body<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0.0f32; 4]).ctx("alloc_from")?;
    let flag = b.alloc_from(&[1u32]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let graph = std::cell::RefCell::new(new_graph(b, GraphOptions::new())?);
    let _s = on_stream(b, &stream)?;
    graph.borrow_mut().capture_begin().ctx("capture_begin")?;
    b.add_scalar(&x, 1.0).ctx("captured add")?;
    let mut inner = None;
    let conditional = b.if_then(&flag, || {
        b.add_scalar(&x, 10.0)?;
        let _back = b.use_stream(&stream)?;
        inner = Some(graph.borrow_mut().capture_end());
        Ok(())
    });
    ensure!(
        matches!(inner, Some(Err(GraphError::CaptureEndInsideBody))),
        "capture_end inside the body: expected Err(CaptureEndInsideBody), got {inner:?}"
    );
    ensure!(
        conditional.is_err() || graph.borrow().state() == GraphState::Capturing,
        "the conditional returned Ok although its body ended the capture"
    );
    let mut g = graph.into_inner();
    if g.state() == GraphState::Capturing {
        expect_err!(
            g.capture_end(),
            GraphError::CaptureInvalidated { .. },
            "the enclosing capture's end"
        );
    }
    ensure!(
        !b.is_capturing(&stream).ctx("is_capturing")?,
        "the stream is left capturing"
    );
    expect_all(b, &x, 0.0, "nothing captured ran")?;
    g.reset();
    Ok(())
}

/// 10.19: inside a conditional node's body, a wait on an event recorded outside that body
/// (eagerly, or in the enclosing capture) is `Unsupported` before the driver sees it — the
/// body's graph can have no edge to work outside it, and a driver that invalidated the body's
/// capture left a graph its own destruction faults on. The capture goes on, ends, and replays
/// the body's work.
pub(super) fn wait_in_a_body_on_an_outside_event<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0.0f32; 4]).ctx("alloc_from")?;
    let flag = b.alloc_from(&[1u32]).ctx("alloc_from")?;
    let (stream, side) = (
        b.new_stream().ctx("new_stream")?,
        b.new_stream().ctx("new_stream")?,
    );
    let (eager, enclosing) = (
        b.new_event().ctx("new_event")?,
        b.new_event().ctx("new_event")?,
    );
    {
        let _side = on_stream(b, &side)?;
        b.record_event(&eager).ctx("eager record")?;
    }
    b.synchronize().ctx("synchronize")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    b.capture_on(&stream, &mut g, || {
        b.record_event(&enclosing)?;
        b.if_then(&flag, || {
            for (what, event) in [("eager", &eager), ("enclosing", &enclosing)] {
                match b.wait_event(event) {
                    Err(GraphError::Unsupported { .. }) => {}
                    other => {
                        return Err(GraphError::ArgumentMismatch(format!(
                            "a wait in a body on the {what} event: expected \
                             Err(Unsupported), got {other:?}"
                        )));
                    }
                }
            }
            b.add_scalar(&x, 1.0)
        })
    })
    .ctx("a capture whose body's waits were refused")?;
    {
        let _s = on_stream(b, &stream)?;
        g.replay().ctx("replay")?;
    }
    expect_all(b, &x, 1.0, "one replay of the body")
}

/// 10.21: an event recorded inside a conditional node's body is waited on from outside that
/// body — by the capturing stream after the node, and by a stream that captures nothing (which
/// would fork into the body's capture). Both are `Unsupported` before the driver sees them: the
/// driver refuses to merge the body's capture with another and invalidates both (the CUDA
/// driver then faulted ending the enclosing capture). The capture goes on, ends, and replays.
pub(super) fn wait_outside_a_body_on_an_event_recorded_in_it<B: Backend>(
    t: &Target<B>,
) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0.0f32; 4]).ctx("alloc_from")?;
    let flag = b.alloc_from(&[1u32]).ctx("alloc_from")?;
    let (stream, side) = (
        b.new_stream().ctx("new_stream")?,
        b.new_stream().ctx("new_stream")?,
    );
    let in_body = b.new_event().ctx("new_event")?;
    let expect_refused = |what: &str, got: Result<(), GraphError>| match got {
        Err(GraphError::Unsupported { .. }) => Ok(()),
        other => Err(GraphError::ArgumentMismatch(format!(
            "a wait {what} on an event recorded in a body: expected Err(Unsupported), got \
             {other:?}"
        ))),
    };
    let mut g = new_graph(b, GraphOptions::new())?;
    b.capture_on(&stream, &mut g, || {
        b.if_then(&flag, || {
            b.add_scalar(&x, 1.0)?;
            b.record_event(&in_body)
        })?;
        expect_refused(
            "on the capturing stream after the node",
            b.wait_event(&in_body),
        )?;
        {
            let _side = b.use_stream(&side)?;
            expect_refused("on a stream that captures nothing", b.wait_event(&in_body))?;
        }
        b.add_scalar(&x, 1.0)
    })
    .ctx("a capture whose waits on the body's event were refused")?;
    ensure!(
        !b.is_capturing(&side).ctx("is_capturing")?,
        "the side stream was forked into the capture"
    );
    {
        let _s = on_stream(b, &stream)?;
        g.replay().ctx("replay")?;
    }
    expect_all(b, &x, 2.0, "one replay: the body and the work after it")?;
    g.reset();
    Ok(())
}

/// 10.20: a capture records an external event and waits on another (external event nodes,
/// which name the events); both events are dropped before the graph replays. The graph keeps
/// the driver's events alive with its nodes (the CUDA driver faulted in `cuGraphLaunch` once
/// the events were destroyed): replays run, and the events go with the graph.
pub(super) fn external_events_live_with_their_graph<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0.0f32; 4]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let external = accel_graph_api::EventOptions::new().external(true);
    let (recorded, waited) = (
        b.new_event_with(external).ctx("new_event_with(external)")?,
        b.new_event_with(external).ctx("new_event_with(external)")?,
    );
    {
        let _s = on_stream(b, &stream)?;
        b.record_event(&waited)
            .ctx("eager record of the waited event")?;
    }
    b.synchronize().ctx("synchronize")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    b.capture_on(&stream, &mut g, || {
        b.wait_event(&waited)?;
        b.add_scalar(&x, 1.0)?;
        b.record_event(&recorded)
    })
    .ctx("a capture with external event nodes")?;
    drop((recorded, waited));
    {
        let _s = on_stream(b, &stream)?;
        g.replay()
            .ctx("first replay after the events were dropped")?;
        g.replay().ctx("second replay")?;
    }
    expect_all(b, &x, 2.0, "two replays")?;
    g.reset();
    Ok(())
}
