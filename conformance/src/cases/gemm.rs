//! §15: GEMM, the portable matrix product: every shape option against the host reference
//! (exact on integer-valued operands, within a stated tolerance on random ones), in `f32`,
//! `bf16` and `f16`; captured like any op; operands kept alive; shapes checked.

use accel_graph_api::{
    Backend, FloatElement, Gemm, GraphError, GraphOptions, gemm_reference,
    half::{bf16, f16},
};

use crate::{
    Case, Target,
    case::requirements::none,
    check::{CaseResult, Ctx, ensure, expect_err, new_graph, replay_on},
};

const GEMM: &str = "15 gemm";

/// The cases of §15, in running order.
pub(crate) fn cases<B: Backend>() -> Vec<Case<B>> {
    Vec::from([
        Case::new(
            "15.01 gemm equals the host reference exactly on integer-valued f32, bf16 and f16",
            GEMM,
            none,
            exact_on_integers,
        ),
        Case::new(
            "15.02 gemm of random f32 is within k·2^-22 of the reference, relative to |A||B|",
            GEMM,
            none,
            random_within_tolerance,
        ),
        Case::new(
            "15.03 a captured gemm does not run; replays equal eager; operands stay alive",
            GEMM,
            none,
            captured_gemm,
        ),
        Case::new(
            "15.04 gemm operands of the wrong length are LengthMismatch; nothing changes",
            GEMM,
            none,
            shape_errors,
        ),
    ])
}

/// Every option: transposes, alpha/beta, batches, and shapes that are not multiples of any
/// tile size.
fn specs() -> Vec<Gemm> {
    let mut specs = Vec::new();
    for (m, n, k) in [
        (1, 1, 1),
        (3, 5, 7),
        (17, 9, 33),
        (64, 64, 64),
        (1, 130, 65),
    ] {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            specs.push(Gemm::new(m, n, k).transpose_a(ta).transpose_b(tb));
        }
    }
    specs.push(Gemm::new(8, 6, 4).scalars(2.0, 0.5));
    specs.push(Gemm::new(8, 6, 4).scalars(-1.0, 1.0).batch(3));
    specs.push(Gemm::new(5, 3, 2).transpose_a(true).batch(4));
    specs
}

/// Small integers, seeded: products and sums of a few of them are exact in every format
/// (and so in every summation order, fused or not).
fn integers(len: usize, seed: u64, span: i64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 33) as i64 % (2 * span + 1) - span) as f32
        })
        .collect()
}

/// Runs `spec` on `T` operands made from `a`, `b`, `c` (f32 values converted to `T`) and
/// returns the backend's result and the reference's, both as f32.
fn run<B: Backend, T: FloatElement>(
    b: &B,
    spec: &Gemm,
    (a, bm, c): (&[f32], &[f32], &[f32]),
) -> Result<(Vec<f32>, Vec<f32>), String> {
    let to_t = |v: &[f32]| v.iter().map(|&x| T::from_f32(x)).collect::<Vec<T>>();
    let (ta, tb, tc) = (to_t(a), to_t(bm), to_t(c));
    let da = b.alloc_from(&ta).ctx("alloc A")?;
    let db = b.alloc_from(&tb).ctx("alloc B")?;
    let dc = b.alloc_from(&tc).ctx("alloc C")?;
    b.gemm(spec, &da, &db, &dc)
        .ctx(&format!("gemm {spec:?} in {}", T::DTYPE))?;
    b.synchronize().ctx("synchronize")?;
    let got = b.download(&dc).ctx("download C")?;
    let mut want = tc;
    gemm_reference(spec, &ta, &tb, &mut want);
    let f = |v: Vec<T>| {
        v.into_iter()
            .map(FloatElement::to_f32)
            .collect::<Vec<f32>>()
    };
    Ok((f(got), f(want)))
}

/// The host values of a product's three operands.
type Operands = (Vec<f32>, Vec<f32>, Vec<f32>);

/// The operands of `spec`, integer-valued within `span`.
fn operands(spec: &Gemm, seed: u64, span: i64) -> Result<Operands, String> {
    let len = |r: accel_graph_api::Result<usize>| r.map_err(|e| e.to_string());
    Ok((
        integers(len(spec.a_len())?, seed, span),
        integers(len(spec.b_len())?, seed + 1, span),
        integers(len(spec.c_len())?, seed + 2, span),
    ))
}

/// 15.01: on integers in -3..=3 every product and partial sum is exact in f32 (|sum| ≤
/// 9·65 ≪ 2²⁴), and the results fit bf16's and f16's integers, so every backend must equal
/// the reference bit for bit whatever its order of summation.
fn exact_on_integers<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    for (i, spec) in specs().iter().enumerate() {
        // bf16 holds integers exactly up to 256: keep k small there.
        let (a, bm, c) = operands(spec, i as u64, 3)?;
        let (got, want) = run::<B, f32>(b, spec, (&a, &bm, &c))?;
        ensure!(
            got == want,
            "f32 {spec:?}: {:?}... expected {:?}...",
            &got[..got.len().min(6)],
            &want[..want.len().min(6)]
        );
        if spec.k <= 16 {
            let (got, want) = run::<B, bf16>(b, spec, (&a, &bm, &c))?;
            ensure!(
                got == want,
                "bf16 {spec:?}: {:?}... expected {:?}...",
                &got[..got.len().min(6)],
                &want[..want.len().min(6)]
            );
            let (got, want) = run::<B, f16>(b, spec, (&a, &bm, &c))?;
            ensure!(
                got == want,
                "f16 {spec:?}: {:?}... expected {:?}...",
                &got[..got.len().min(6)],
                &want[..want.len().min(6)]
            );
        }
    }
    Ok(())
}

/// 15.02: random f32 in [-1, 1): each element within `(k + 2) · 2⁻²² · (|alpha| · Σ|a||b| +
/// |beta · c|)` of the reference — twice f32's worst-case bound for a sum of k products in any
/// order, fused or not, which is what libraries (cuBLAS, a tiled kernel) may do.
fn random_within_tolerance<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    for (i, spec) in specs().iter().enumerate() {
        let (a, bm, c) = operands(spec, 100 + i as u64, 1 << 20)?;
        let scale = |v: Vec<f32>| {
            v.into_iter()
                .map(|x| x / (1 << 20) as f32)
                .collect::<Vec<_>>()
        };
        let (a, bm, c) = (scale(a), scale(bm), scale(c));
        let (got, want) = run::<B, f32>(b, spec, (&a, &bm, &c))?;
        // Σ|a||b| per element, from the reference run on absolute values.
        let abs = |v: &[f32]| v.iter().map(|x| x.abs()).collect::<Vec<_>>();
        let mut bound = abs(&c);
        gemm_reference(
            &spec.scalars(spec.alpha.abs(), spec.beta.abs()),
            &abs(&a),
            &abs(&bm),
            &mut bound,
        );
        let eps = (spec.k as f32 + 2.0) * f32::EPSILON * 2.0;
        for (j, ((g, w), m)) in got.iter().zip(&want).zip(&bound).enumerate() {
            let error = (g - w).abs();
            ensure!(
                error <= eps * m && !error.is_nan(),
                "f32 {spec:?}: element {j} is {g}, reference {w} (bound {})",
                eps * m
            );
        }
    }
    Ok(())
}

/// 15.03: a capture of `C = A·B` then `D = Cᵀ·A` (bf16) leaves the outputs unwritten; after
/// the operands' buffers are dropped, replays give the eager result.
fn captured_gemm<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let (m, k) = (12, 20);
    let a = integers(m * k, 7, 2);
    let bm = integers(k * m, 8, 2);
    let to = |v: &[f32]| v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>();
    let first = Gemm::new(m, m, k);
    let second = Gemm::new(m, k, m).transpose_a(true);
    let program = |da: &B::Buffer<bf16>,
                   db: &B::Buffer<bf16>,
                   dc: &B::Buffer<bf16>,
                   dd: &B::Buffer<bf16>|
     -> Result<(), GraphError> {
        b.gemm(&first, da, db, dc)?;
        b.gemm(&second, dc, da, dd)
    };
    // Eager.
    let (ea, eb) = (
        b.alloc_from(&to(&a)).ctx("alloc")?,
        b.alloc_from(&to(&bm)).ctx("alloc")?,
    );
    let (ec, ed) = (
        b.alloc::<bf16>(m * m).ctx("alloc")?,
        b.alloc::<bf16>(m * k).ctx("alloc")?,
    );
    program(&ea, &eb, &ec, &ed).ctx("eager gemms")?;
    b.synchronize().ctx("synchronize")?;
    let want = b.download(&ed).ctx("download")?;
    // Captured, operands dropped before replay.
    let out = b
        .alloc_from(&vec![bf16::from_f32(-1.0); m * k])
        .ctx("alloc")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    {
        let (ga, gb) = (
            b.alloc_from(&to(&a)).ctx("alloc")?,
            b.alloc_from(&to(&bm)).ctx("alloc")?,
        );
        let gc = b.alloc::<bf16>(m * m).ctx("alloc")?;
        b.capture_on(&stream, &mut g, || program(&ga, &gb, &gc, &out))
            .ctx("capture of two gemms")?;
    }
    b.synchronize().ctx("synchronize")?;
    ensure!(
        b.download(&out)
            .ctx("download")?
            .iter()
            .all(|x| x.to_f32() == -1.0),
        "capturing the gemms ran them"
    );
    for _ in 0..2 {
        replay_on(b, &stream, &mut g)?;
    }
    b.synchronize().ctx("synchronize")?;
    let got = b.download(&out).ctx("download")?;
    ensure!(got == want, "replayed gemms differ from eager ones");
    Ok(())
}

/// 15.04: operands one element short or long, and a batch of 0, are refused; C is unchanged.
fn shape_errors<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let spec = Gemm::new(4, 3, 2);
    let a = b.alloc_from(&[1.0f32; 8]).ctx("alloc")?;
    let short = b.alloc_from(&[1.0f32; 5]).ctx("alloc")?;
    let bm = b.alloc_from(&[1.0f32; 6]).ctx("alloc")?;
    let c = b.alloc_from(&[9.0f32; 12]).ctx("alloc")?;
    let long = b.alloc_from(&[9.0f32; 13]).ctx("alloc")?;
    expect_err!(
        b.gemm(&spec, &a, &short, &c),
        GraphError::LengthMismatch { .. },
        "B too short"
    );
    expect_err!(
        b.gemm(&spec, &a, &bm, &long),
        GraphError::LengthMismatch { .. },
        "C too long"
    );
    expect_err!(
        b.gemm(&spec, &bm, &bm, &c),
        GraphError::LengthMismatch { .. },
        "A of B's length"
    );
    expect_err!(
        b.gemm(&spec.batch(0), &a, &bm, &c),
        GraphError::ArgumentMismatch(_),
        "a batch of 0"
    );
    b.synchronize().ctx("synchronize")?;
    ensure!(
        b.download(&c).ctx("download")? == [9.0; 12],
        "a refused gemm wrote C"
    );
    Ok(())
}
