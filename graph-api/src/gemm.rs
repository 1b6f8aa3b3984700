//! GEMM, the portable matrix product: `C = alpha · op(A) · op(B) + beta · C` on row-major
//! matrices of `f32`, `bf16` or `f16`, batched, with the host reference every backend is held
//! to.

use crate::{FloatElement, GraphError, Result};

/// The shape and scalars of a (batched) matrix product on row-major, contiguous matrices:
/// for each of `batch` matrices, `C[m×n] = alpha · op(A)[m×k] · op(B)[k×n] + beta · C`.
///
/// `op(A)` is `A` (stored `m×k`) or, with [`Gemm::transpose_a`], `Aᵀ` (`A` stored `k×m`);
/// likewise `op(B)` is `B` (`k×n`) or `Bᵀ` (`B` stored `n×k`). Batches follow each other in
/// each buffer (`m·k`, `k·n` and `m·n` elements apart). Products accumulate in `f32`; 16-bit
/// results are rounded once, at the end.
///
/// ```
/// use accel_graph_api::{prelude::*, Gemm};
/// let b = accel_graph_mock::MockBackend::new();
/// // [1 2; 3 4] · [5 6; 7 8] = [19 22; 43 50]
/// let x = b.alloc_from(&[1.0f32, 2.0, 3.0, 4.0])?;
/// let w = b.alloc_from(&[5.0f32, 6.0, 7.0, 8.0])?;
/// let y = b.alloc::<f32>(4)?;
/// b.gemm(&Gemm::new(2, 2, 2), &x, &w, &y)?;
/// assert_eq!(b.download(&y)?, vec![19.0, 22.0, 43.0, 50.0]);
/// # Ok::<(), GraphError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gemm {
    /// Rows of `op(A)` and `C`.
    pub m: usize,
    /// Columns of `op(B)` and `C`.
    pub n: usize,
    /// Columns of `op(A)`, rows of `op(B)`.
    pub k: usize,
    /// `op(A) = Aᵀ`.
    pub transpose_a: bool,
    /// `op(B) = Bᵀ`.
    pub transpose_b: bool,
    /// Factor of the product.
    pub alpha: f32,
    /// Factor of `C`'s old value (0: `C` is only written; its old contents, even NaN, do not
    /// matter).
    pub beta: f32,
    /// Number of products (1: one).
    pub batch: usize,
}

impl Gemm {
    /// `C[m×n] = A[m×k] · B[k×n]` (no transposes, `alpha = 1`, `beta = 0`, one batch).
    pub fn new(m: usize, n: usize, k: usize) -> Self {
        Gemm {
            m,
            n,
            k,
            transpose_a: false,
            transpose_b: false,
            alpha: 1.0,
            beta: 0.0,
            batch: 1,
        }
    }

    /// Sets `transpose_a`.
    pub fn transpose_a(mut self, on: bool) -> Self {
        self.transpose_a = on;
        self
    }

    /// Sets `transpose_b`.
    pub fn transpose_b(mut self, on: bool) -> Self {
        self.transpose_b = on;
        self
    }

    /// Sets `alpha` and `beta`.
    pub fn scalars(mut self, alpha: f32, beta: f32) -> Self {
        self.alpha = alpha;
        self.beta = beta;
        self
    }

    /// Sets the batch count.
    pub fn batch(mut self, batch: usize) -> Self {
        self.batch = batch;
        self
    }

    fn elements(&self, rows: usize, cols: usize) -> Result<usize> {
        rows.checked_mul(cols)
            .and_then(|e| e.checked_mul(self.batch))
            .ok_or_else(|| GraphError::ArgumentMismatch(format!("gemm {self:?}: sizes overflow")))
    }

    /// Elements `A` needs: `batch · m · k`.
    pub fn a_len(&self) -> Result<usize> {
        self.elements(self.m, self.k)
    }

    /// Elements `B` needs: `batch · k · n`.
    pub fn b_len(&self) -> Result<usize> {
        self.elements(self.k, self.n)
    }

    /// Elements `C` needs: `batch · m · n`.
    pub fn c_len(&self) -> Result<usize> {
        self.elements(self.m, self.n)
    }

    /// Checks the operands' lengths: each exactly what the shape needs
    /// ([`GraphError::LengthMismatch`] naming the operand otherwise); a batch of 0 is refused.
    pub fn check(&self, a: usize, b: usize, c: usize) -> Result<()> {
        if self.batch == 0 {
            return Err(GraphError::ArgumentMismatch(
                "gemm: a batch of 0 matrices".to_owned(),
            ));
        }
        for (op, expected, got) in [
            ("gemm operand A", self.a_len()?, a),
            ("gemm operand B", self.b_len()?, b),
            ("gemm operand C", self.c_len()?, c),
        ] {
            if expected != got {
                return Err(GraphError::LengthMismatch { op, expected, got });
            }
        }
        Ok(())
    }

    /// Index of `op(A)[i][p]` in batch `t`'s `A`.
    #[inline]
    fn a_index(&self, i: usize, p: usize) -> usize {
        if self.transpose_a {
            p * self.m + i
        } else {
            i * self.k + p
        }
    }

    /// Index of `op(B)[p][j]` in batch `t`'s `B`.
    #[inline]
    fn b_index(&self, p: usize, j: usize) -> usize {
        if self.transpose_b {
            j * self.k + p
        } else {
            p * self.n + j
        }
    }
}

/// The host reference of [`Gemm`]: each element's products summed in `f32` in order of `p`
/// (with `f32` rounding after every product and sum: no fused multiply-add), then
/// `alpha · sum + beta · c` rounded to `T`. The mock runs exactly this; the GPU backends'
/// libraries sum in other orders and may fuse, so they agree within a tolerance (see the
/// conformance cases: `k · 2⁻²³` relative for `f32`).
///
/// The operand lengths must have been checked ([`Gemm::check`]).
pub fn gemm_reference<T: FloatElement>(spec: &Gemm, a: &[T], b: &[T], c: &mut [T]) {
    let (mk, kn, mn) = (spec.m * spec.k, spec.k * spec.n, spec.m * spec.n);
    for t in 0..spec.batch {
        let (a, b) = (&a[t * mk..][..mk], &b[t * kn..][..kn]);
        let c = &mut c[t * mn..][..mn];
        for i in 0..spec.m {
            for j in 0..spec.n {
                let mut sum = 0.0f32;
                for p in 0..spec.k {
                    let product = a[spec.a_index(i, p)].to_f32() * b[spec.b_index(p, j)].to_f32();
                    sum += product;
                }
                let scaled = spec.alpha * sum;
                let out = if spec.beta == 0.0 {
                    scaled
                } else {
                    let old = spec.beta * c[i * spec.n + j].to_f32();
                    scaled + old
                };
                c[i * spec.n + j] = T::from_f32(out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposes_read_the_stored_layouts() {
        // A = [1 2 3; 4 5 6] (2x3), B = [1 0; 0 1; 1 1] (3x2): AB = [4 5; 10 11].
        let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b = [1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0];
        let mut c = [0.0f32; 4];
        gemm_reference(&Gemm::new(2, 2, 3), &a, &b, &mut c);
        assert_eq!(c, [4.0, 5.0, 10.0, 11.0]);
        // The same product from Aᵀ stored (3x2) and Bᵀ stored (2x3).
        let at = [1.0f32, 4.0, 2.0, 5.0, 3.0, 6.0];
        let bt = [1.0f32, 0.0, 1.0, 0.0, 1.0, 1.0];
        let mut c2 = [1.0f32; 4];
        let spec = Gemm::new(2, 2, 3)
            .transpose_a(true)
            .transpose_b(true)
            .scalars(2.0, 1.0);
        gemm_reference(&spec, &at, &bt, &mut c2);
        assert_eq!(c2, [9.0, 11.0, 21.0, 23.0]);
    }

    #[test]
    fn shapes_are_checked() {
        let spec = Gemm::new(2, 3, 4).batch(2);
        assert!(spec.check(16, 24, 12).is_ok());
        assert!(matches!(
            spec.check(16, 24, 11),
            Err(GraphError::LengthMismatch {
                op: "gemm operand C",
                ..
            })
        ));
        assert!(Gemm::new(1, 1, 1).batch(0).check(0, 0, 0).is_err());
        assert!(Gemm::new(usize::MAX, 2, 2).a_len().is_err());
    }
}
