//! The model step on the host, in plain Rust: the same arithmetic in the same order as the
//! kernels' definitions, the host GEMM ([`accel_graph::gemm_reference`]) and the portable
//! `axpy` — so the mock, which runs exactly those, equals it bit for bit. Devices differ only
//! in their GEMMs' order of summation (see the tolerance in the model's tests).

use accel_graph::{Gemm, PortableOp, gemm_reference};

use super::{MlpShape, kernels::ordered_sum};

/// A seeded generator (PCG-style LCG), so parameters and inputs are the same everywhere.
struct Lcg(u64);

impl Lcg {
    fn new(seed: u64) -> Self {
        Lcg(seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407))
    }

    /// Uniform in [-1, 1).
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// Initial parameters in the layout of [`MlpShape::layout`]: each layer's weights and bias
/// uniform in ±1/√fan_in (PyTorch's `nn.Linear` default range), the padding between them 0.
pub fn initial_params(shape: MlpShape, seed: u64) -> Vec<f32> {
    let layout = shape.layout();
    let mut params = vec![0.0f32; layout.len];
    let mut rng = Lcg::new(seed);
    let mut fill = |range: std::ops::Range<usize>, fan_in: usize| {
        let bound = 1.0 / (fan_in as f32).sqrt();
        for p in &mut params[range] {
            *p = rng.next() * bound;
        }
    };
    fill(layout.w1.clone(), shape.input);
    fill(layout.b1.clone(), shape.input);
    fill(layout.w2.clone(), shape.hidden);
    fill(layout.b2.clone(), shape.hidden);
    params
}

/// A batch of inputs (`batch × input`) and targets (`batch × output`), seeded.
pub fn inputs(shape: MlpShape, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let mut rng = Lcg::new(seed ^ 0x5eed);
    let x = (0..shape.batch * shape.input).map(|_| rng.next()).collect();
    let t = (0..shape.outputs()).map(|_| rng.next() * 0.5).collect();
    (x, t)
}

/// `2 / n`: the loss gradient's factor.
pub fn grad_scale(shape: MlpShape) -> f32 {
    2.0 / shape.outputs() as f32
}

/// `1 / n`: the mean's factor.
pub fn mean_scale(shape: MlpShape) -> f32 {
    1.0 / shape.outputs() as f32
}

/// One training step on the host: updates `params` in place and returns the loss.
pub fn step(shape: MlpShape, lr: f32, params: &mut [f32], x: &[f32], t: &[f32]) -> f32 {
    let s = shape;
    let l = shape.layout();
    let (n_hidden, n_out) = (s.batch * s.hidden, s.outputs());
    // Forward.
    let mut h = vec![0.0f32; n_hidden];
    gemm_reference(
        &Gemm::new(s.batch, s.hidden, s.input),
        x,
        &params[l.w1.clone()],
        &mut h,
    );
    let b1 = &params[l.b1.clone()];
    for (i, v) in h.iter_mut().enumerate() {
        let z = *v + b1[i % s.hidden];
        *v = if z > 0.0 { z } else { 0.0 };
    }
    let mut y = vec![0.0f32; n_out];
    gemm_reference(
        &Gemm::new(s.batch, s.output, s.hidden),
        &h,
        &params[l.w2.clone()],
        &mut y,
    );
    let b2 = &params[l.b2.clone()];
    for (i, v) in y.iter_mut().enumerate() {
        *v += b2[i % s.output];
    }
    // Loss and its gradient.
    let scale = grad_scale(s);
    let d: Vec<f32> = y.iter().zip(t).map(|(y, t)| y - t).collect();
    let dy: Vec<f32> = d.iter().map(|d| scale * d).collect();
    let sq: Vec<f32> = d.iter().map(|d| d * d).collect();
    let loss = ordered_sum(&sq) * mean_scale(s);
    // Backward.
    let mut grads = vec![0.0f32; l.len];
    gemm_reference(
        &Gemm::new(s.hidden, s.output, s.batch).transpose_a(true),
        &h,
        &dy,
        &mut grads[l.w2.clone()],
    );
    column_sums(&dy, s.batch, s.output, &mut grads[l.b2.clone()]);
    let mut dh = vec![0.0f32; n_hidden];
    gemm_reference(
        &Gemm::new(s.batch, s.hidden, s.output).transpose_b(true),
        &dy,
        &params[l.w2.clone()],
        &mut dh,
    );
    for (d, a) in dh.iter_mut().zip(&h) {
        if *a <= 0.0 {
            *d = 0.0;
        }
    }
    gemm_reference(
        &Gemm::new(s.input, s.hidden, s.batch).transpose_a(true),
        x,
        &dh,
        &mut grads[l.w1.clone()],
    );
    column_sums(&dh, s.batch, s.hidden, &mut grads[l.b1.clone()]);
    // SGD, as the portable axpy computes it.
    let sgd = PortableOp::Axpy {
        y: (),
        a: -lr,
        x: (),
    };
    for (p, g) in params.iter_mut().zip(&grads) {
        *p = sgd.element(*p, *g);
    }
    loss
}

/// `out[j] = Σ_r m[r · cols + j]`, rows in order.
fn column_sums(m: &[f32], rows: usize, cols: usize, out: &mut [f32]) {
    for (j, o) in out.iter_mut().enumerate() {
        let mut s = 0.0f32;
        for r in 0..rows {
            s += m[r * cols + j];
        }
        *o = s;
    }
}
