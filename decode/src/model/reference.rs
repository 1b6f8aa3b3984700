//! [`Reference`]: the whole model on the host, in plain Rust — the same functions the mock's
//! kernels run ([`super::kernels`]) and the same host GEMM ([`accel_graph::gemm_reference`]),
//! in the same order as [`Model::forward`](super::Model::forward). So on the mock the engine's
//! tokens and logits equal the reference's bit for bit, eager or graphed, whatever the bucket
//! (every operation computes each row from that row alone).

use accel_graph::{Gemm, GraphError, Result, gemm_reference};

use super::{
    HostWeights,
    inputs::{self, StepRow},
    kernels::{
        argmax::argmax,
        attention::{self, AttentionShape, attention, attention_combine, attention_partials},
        embed::embed,
        rmsnorm::rmsnorm,
        rope::{RopeShape, rope_kv, table},
        swiglu::swiglu,
    },
};
use crate::{Config, DecodeElement};

/// The model and its key/value cache on the host.
///
/// ```
/// use accel_graph_decode::{Config, model::{Reference, StepRow}};
/// let mut r = Reference::<f32>::random(Config::tiny(), 1, 2);
/// let first = r.step(&[StepRow::new(0, 7, 0), StepRow::new(1, 9, 0)])?;
/// assert_eq!(first.tokens.len(), 2);
/// assert_eq!(first.logits.len(), 2 * 256);
/// let second = r.step(&[StepRow::new(0, first.tokens[0], 1)])?;
/// assert_eq!(second.tokens.len(), 1);
/// # Ok::<(), accel_graph::GraphError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Reference<T: DecodeElement> {
    config: Config,
    weights: HostWeights<T>,
    table: Vec<f32>,
    keys: Vec<Vec<T>>,
    values: Vec<Vec<T>>,
    slots: usize,
}

/// What one reference step gives: each row's next token and logits (`[rows, vocab]`).
#[derive(Debug, Clone, PartialEq)]
pub struct ReferenceStep<T> {
    /// The greedy next token of each row.
    pub tokens: Vec<u32>,
    /// The logits, row after row.
    pub logits: Vec<T>,
}

impl<T: DecodeElement> Reference<T> {
    /// The reference of `config` with `weights`, its cache holding `slots` sequences (zeros).
    pub fn new(config: Config, weights: HostWeights<T>, slots: usize) -> Self {
        let len = slots * config.kv_heads * config.max_len * config.head_dim;
        let zeros = vec![T::from_f32(0.0); len];
        Reference {
            table: table(&config),
            keys: vec![zeros.clone(); config.layers],
            values: vec![zeros; config.layers],
            config,
            weights,
            slots,
        }
    }

    /// The reference with [`HostWeights::random`] weights for `seed`.
    pub fn random(config: Config, seed: u64, slots: usize) -> Self {
        Self::new(config, HostWeights::random(&config, seed), slots)
    }

    /// The sizes.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// One decode step of `rows`. Errors with [`GraphError::ArgumentMismatch`] for no row, a
    /// slot past the cache, a token past the vocabulary or a position past `max_len`.
    pub fn step(&mut self, rows: &[StepRow]) -> Result<ReferenceStep<T>> {
        let meta = self.check(rows)?;
        let n = rows.len();
        let mut x = self.embed(&meta, n);
        for l in 0..self.config.layers {
            self.attention_block(l, &meta, n, &mut x, 1.0);
            self.mlp_block(l, n, &mut x, 1.0);
        }
        Ok(self.head(&x, n))
    }

    /// Checks `rows` (the errors of [`Reference::step`]) and packs them (no padding).
    pub(crate) fn check(&self, rows: &[StepRow]) -> Result<Vec<u32>> {
        let c = &self.config;
        if rows.is_empty() {
            return Err(GraphError::ArgumentMismatch(
                "reference step: no rows".to_owned(),
            ));
        }
        for row in rows {
            if row.slot as usize >= self.slots
                || row.token as usize >= c.vocab
                || row.position as usize >= c.max_len
            {
                return Err(GraphError::ArgumentMismatch(format!(
                    "reference step: {row:?} is outside the cache ({} slots, {} positions) \
                     or the vocabulary ({})",
                    self.slots, c.max_len, c.vocab
                )));
            }
        }
        Ok(inputs::pack(rows, rows.len()))
    }

    /// The residual stream of the `n` rows of `meta` after the embedding.
    pub(crate) fn embed(&self, meta: &[u32], n: usize) -> Vec<T> {
        let c = &self.config;
        let mut x = vec![T::from_f32(0.0); n * c.hidden];
        embed(&mut x, &self.weights.embed, meta, n, c.hidden, c.vocab);
        x
    }

    /// Layer `l`'s attention on the residual stream `x`: its keys and values into the cache,
    /// and `x = a · Woᵀ + beta · x` (`beta` 1 on one device; 0 leaves a rank's bare partial
    /// product for the all-reduce).
    pub(crate) fn attention_block(
        &mut self,
        l: usize,
        meta: &[u32],
        n: usize,
        x: &mut [T],
        beta: f32,
    ) {
        let c = self.config;
        let zero = T::from_f32(0.0);
        let mut h = vec![zero; n * c.hidden];
        let mut qkv = vec![zero; n * c.qkv_dim()];
        let mut q = vec![zero; n * c.q_dim()];
        let mut attn = vec![zero; n * c.q_dim()];
        let splits = c.attention_splits();
        let linear = |out: usize, k: usize| Gemm::new(n, out, k).transpose_b(true);
        let lw = &self.weights.layers[l];

        rmsnorm(&mut h, x, &lw.attn_norm, n, c.hidden, c.rms_eps);
        gemm_reference(&linear(c.qkv_dim(), c.hidden), &h, &lw.qkv, &mut qkv);
        rope_kv(
            &mut q,
            &mut self.keys[l],
            &mut self.values[l],
            &qkv,
            &self.table,
            meta,
            RopeShape {
                rows: n,
                heads: c.heads,
                kv_heads: c.kv_heads,
                head_dim: c.head_dim,
                max_len: c.max_len,
                slots: self.slots,
            },
        );
        let shape = AttentionShape {
            rows: n,
            heads: c.heads,
            kv_heads: c.kv_heads,
            head_dim: c.head_dim,
            max_len: c.max_len,
            slots: self.slots,
            scale: 1.0 / (c.head_dim as f32).sqrt(),
        };
        let (keys, values) = (&self.keys[l], &self.values[l]);
        if splits > 1 {
            let mut partials =
                vec![0.0f32; n * c.heads * splits * attention::partial_len(c.head_dim)];
            attention_partials(
                &mut partials,
                &q,
                keys,
                values,
                meta,
                shape,
                c.attention_chunk,
                splits,
            );
            attention_combine(&mut attn, &partials, n, c.heads, c.head_dim, splits);
        } else {
            attention(&mut attn, &q, keys, values, meta, shape);
        }
        gemm_reference(
            &linear(c.hidden, c.q_dim()).scalars(1.0, beta),
            &attn,
            &lw.out,
            x,
        );
    }

    /// Layer `l`'s MLP on the residual stream `x`: `x = swiglu(h · Wguᵀ) · Wdownᵀ + beta · x`.
    pub(crate) fn mlp_block(&self, l: usize, n: usize, x: &mut [T], beta: f32) {
        let c = &self.config;
        let zero = T::from_f32(0.0);
        let mut h = vec![zero; n * c.hidden];
        let mut gate_up = vec![zero; n * 2 * c.intermediate];
        let mut act = vec![zero; n * c.intermediate];
        let linear = |out: usize, k: usize| Gemm::new(n, out, k).transpose_b(true);
        let lw = &self.weights.layers[l];
        rmsnorm(&mut h, x, &lw.mlp_norm, n, c.hidden, c.rms_eps);
        gemm_reference(
            &linear(2 * c.intermediate, c.hidden),
            &h,
            &lw.gate_up,
            &mut gate_up,
        );
        swiglu(&mut act, &gate_up, n, c.intermediate);
        gemm_reference(
            &linear(c.hidden, c.intermediate).scalars(1.0, beta),
            &act,
            &lw.down,
            x,
        );
    }

    /// The final norm, the LM head and greedy argmax of the residual stream `x`.
    pub(crate) fn head(&self, x: &[T], n: usize) -> ReferenceStep<T> {
        let c = &self.config;
        let zero = T::from_f32(0.0);
        let mut h = vec![zero; n * c.hidden];
        rmsnorm(&mut h, x, &self.weights.final_norm, n, c.hidden, c.rms_eps);
        let mut logits = vec![zero; n * c.vocab];
        let linear = Gemm::new(n, c.vocab, c.hidden).transpose_b(true);
        gemm_reference(&linear, &h, &self.weights.lm_head, &mut logits);
        let mut tokens = vec![0u32; n];
        argmax(&mut tokens, &logits, n, c.vocab);
        ReferenceStep { tokens, logits }
    }
}
