//! The arithmetic of the portable ops. Eager execution and graph replay both call these very
//! functions, so a replay gives the eager result bit for bit.

use std::sync::atomic::{AtomicU32, Ordering};

#[inline(always)]
fn load(cell: &AtomicU32) -> f32 {
    f32::from_bits(cell.load(Ordering::Relaxed))
}

#[inline(always)]
fn store(cell: &AtomicU32, value: f32) {
    cell.store(value.to_bits(), Ordering::Relaxed);
}

/// `x[i] = value`.
pub(crate) fn fill(x: &[AtomicU32], value: f32) {
    let bits = value.to_bits();
    for cell in x {
        cell.store(bits, Ordering::Relaxed);
    }
}

/// `dst[i] = src[i]`; lengths are checked before an op is issued.
pub(crate) fn copy(dst: &[AtomicU32], src: &[AtomicU32]) {
    for (d, s) in dst.iter().zip(src) {
        d.store(s.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// `x[i] += c`.
pub(crate) fn add_scalar(x: &[AtomicU32], c: f32) {
    for cell in x {
        store(cell, load(cell) + c);
    }
}

/// `x[i] *= a`.
pub(crate) fn scale(x: &[AtomicU32], a: f32) {
    for cell in x {
        store(cell, load(cell) * a);
    }
}

/// `y[i] = y[i] + (a * x[i])`: the product is rounded to `f32` before the sum. Rust never
/// contracts `a * b + c` into a fused multiply-add on its own, so this is reproducible on every
/// machine; `mul_add` is deliberately not used.
pub(crate) fn axpy(y: &[AtomicU32], a: f32, x: &[AtomicU32]) {
    for (yi, xi) in y.iter().zip(x) {
        let product = a * load(xi);
        store(yi, load(yi) + product);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cells(v: &[f32]) -> Vec<AtomicU32> {
        v.iter().map(|x| AtomicU32::new(x.to_bits())).collect()
    }

    fn values(c: &[AtomicU32]) -> Vec<f32> {
        c.iter().map(load).collect()
    }

    #[test]
    fn axpy_rounds_the_product_first() {
        // Chosen so that a fused multiply-add would give a different last bit.
        let a = 1.0 + f32::EPSILON;
        let xv = 1.0 - f32::EPSILON / 2.0;
        let yv = -1.0;
        let (y, x) = (cells(&[yv]), cells(&[xv]));
        axpy(&y, a, &x);
        let unfused = yv + a * xv;
        assert_eq!(values(&y)[0].to_bits(), unfused.to_bits());
        assert_ne!(a.mul_add(xv, yv).to_bits(), unfused.to_bits());
    }

    #[test]
    fn elementwise_ops() {
        let x = cells(&[1.0, 2.0]);
        add_scalar(&x, 1.0);
        scale(&x, 3.0);
        assert_eq!(values(&x), vec![6.0, 9.0]);
        let y = cells(&[0.0, 0.0]);
        copy(&y, &x);
        fill(&x, -1.0);
        assert_eq!((values(&x), values(&y)), (vec![-1.0, -1.0], vec![6.0, 9.0]));
    }
}
