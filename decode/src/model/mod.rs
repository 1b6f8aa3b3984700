//! The Llama decoder written once over `B: Backend`: [`Model`] issues one decode step's work —
//! embedding, the layers, the final norm, the LM head and greedy sampling — on the current
//! stream, from the portable GEMM and the kernels of [`kernels`].
//!
//! ```text
//! x = embed[token]                                          decode_embed
//! for each layer:
//!     h = rmsnorm(x) · w_attn_norm                          decode_rmsnorm
//!     qkv = h · Wqkvᵀ                                       GEMM
//!     q, cache[slot, pos] = rope(q), (rope(k), v)           decode_rope_kv
//!     a = softmax(q·Kᵀ/√d) · V  over cache[slot, 0..=pos]   decode_attention (GQA)
//!     x = x + a · Woᵀ                                       GEMM, beta = 1 (residual fused)
//!     h = rmsnorm(x) · w_mlp_norm                           decode_rmsnorm
//!     gu = h · Wguᵀ                                         GEMM (gate and up in one)
//!     x = x + (silu(gate) · up) · Wdownᵀ                    decode_swiglu, GEMM beta = 1
//! logits = rmsnorm(x) · w_norm · Wheadᵀ                     decode_rmsnorm, GEMM
//! next = argmax(logits)                                     decode_argmax
//! ```
//!
//! Nine launches per layer (four GEMMs, five kernels) and four more per step; with a cache
//! longer than [`Config::attention_chunk`] positions attention is split over chunks
//! (flash-decoding: two kernels), ten per layer. The two
//! residual additions ride on the GEMMs' epilogue (`C = A·Bᵀ + 1·C`): the sum is rounded once,
//! where PyTorch rounds the projection and then the sum.
//!
//! Split over ranks ([`Model::tensor_parallel`], [`crate::tp`]), each rank holds its query
//! and key/value heads and intermediate columns, and each of the two residual GEMMs of a
//! layer is followed by an all-reduce (sum) of the residual stream on the rank's
//! communicator, issued on the current stream like the kernels, so a capture records it too.
//!
//! Activations are allocated inside [`Model::forward`] with [`Backend::alloc`]: eagerly from
//! the device, inside a capture from the graph's pool, where buckets captured into one pool
//! share them. What a step leaves for later — logits, next tokens, the cache — lives in
//! buffers allocated outside any capture ([`StepBuffers`], [`KvCache`]).
//!
//! ```
//! use accel_graph::prelude::*;
//! use accel_graph_decode::{Config, model::{KvCache, Model, StepBuffers, StepRow, inputs}};
//!
//! let b = accel_graph::mock::MockBackend::new();
//! let config = Config::tiny();
//! let model = Model::<_, f32>::random(&b, config, 1)?;
//! let cache = KvCache::new(&b, &config, 2)?;
//! let io = StepBuffers::new(&b, &config, 2)?;
//! // Token 5 at position 0 of the sequence in slot 1 (and one padding row).
//! b.upload(io.meta(), &inputs::pack(&[StepRow::new(1, 5, 0)], 2))?;
//! model.forward(&io, &cache)?;
//! let next = b.download(io.next())?[0];
//! assert!(next < 256);
//! # Ok::<(), GraphError>(())
//! ```

pub mod inputs;
pub mod kernels;
mod kv_cache;
pub mod reference;
mod step_buffers;
mod tensor_parallel;
mod weights;

use std::sync::Arc;

use accel_graph::{
    Backend, DeviceBuffer, Gemm, GraphError, Result,
    kernel::{Kernel, KernelArg},
};

pub use inputs::StepRow;
pub use kv_cache::KvCache;
pub use reference::{Reference, ReferenceStep};
pub use step_buffers::StepBuffers;
pub use weights::{HostWeights, LayerWeights, Tensor, Weights};

use crate::{Config, DecodeElement};
use kernels::{Kernels, attention};

/// The model on backend `B` with elements `T`: its weights in device memory, its RoPE table
/// and its kernels (compiled when the model is made, so no capture compiles them).
#[derive(Debug)]
pub struct Model<B: Backend, T: DecodeElement> {
    backend: B,
    config: Config,
    weights: Weights<B::Buffer<T>>,
    rope: B::Buffer<f32>,
    kernels: Arc<Kernels>,
    /// On several ranks: this rank's part and the communicator.
    shard: Option<tensor_parallel::Shard<B>>,
}

impl<B: Backend, T: DecodeElement> Model<B, T> {
    /// The model of `config` with [`Tensor::random`] weights for `seed`, generated and
    /// uploaded one tensor at a time. Errors: an invalid config ([`Config::validate`]), the
    /// device's memory, a kernel this backend cannot run for `T` (e.g. `bf16` on wgpu:
    /// [`GraphError::Unsupported`]) or compile.
    pub fn random(backend: &B, config: Config, seed: u64) -> Result<Self> {
        config.validate()?;
        let weights = Weights::try_build(&config, |t| {
            backend.alloc_from(&t.random::<T>(&config, seed))
        })?;
        Self::with_weights(backend, config, weights)
    }

    /// The model of `config` with the weights `host` (each tensor of its [`Tensor::len`]).
    pub fn from_host(backend: &B, config: Config, host: &HostWeights<T>) -> Result<Self> {
        config.validate()?;
        let weights = Weights::try_build(&config, |t| {
            let data = host.get(t).ok_or_else(|| {
                GraphError::ArgumentMismatch(format!("weights: {t:?} is missing"))
            })?;
            if data.len() != t.len(&config) {
                return Err(GraphError::LengthMismatch {
                    op: "model weights",
                    expected: t.len(&config),
                    got: data.len(),
                });
            }
            backend.alloc_from(data)
        })?;
        Self::with_weights(backend, config, weights)
    }

    fn with_weights(backend: &B, config: Config, weights: Weights<B::Buffer<T>>) -> Result<Self> {
        let kernels = Kernels::get::<T>();
        for kernel in kernels.all() {
            backend.prepare_kernel(kernel)?;
        }
        Ok(Model {
            backend: backend.clone(),
            rope: backend.alloc_from(&kernels::rope::table(&config))?,
            config,
            weights,
            kernels,
            shard: None,
        })
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The sizes (of this rank's part, for a tensor-parallel model: [`Model::partition`]).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The weights in device memory.
    pub fn weights(&self) -> &Weights<B::Buffer<T>> {
        &self.weights
    }

    /// Bytes of device memory the weights and the RoPE table hold.
    pub fn bytes(&self) -> usize {
        let w = &self.weights;
        let layers: usize = w
            .layers
            .iter()
            .map(|l| {
                [
                    &l.attn_norm,
                    &l.qkv,
                    &l.out,
                    &l.mlp_norm,
                    &l.gate_up,
                    &l.down,
                ]
                .iter()
                .map(|b| b.num_bytes())
                .sum::<usize>()
            })
            .sum();
        layers
            + w.embed.num_bytes()
            + w.final_norm.num_bytes()
            + w.lm_head.num_bytes()
            + self.rope.num_bytes()
    }

    /// Launches issued per step: nine per layer (ten where attention is split over chunks of
    /// a long cache), four more.
    pub fn launches_per_step(&self) -> usize {
        let per_layer = if self.config.attention_splits() > 1 {
            10
        } else {
            9
        };
        per_layer * self.config.layers + 4
    }

    fn launch(
        &self,
        kernel: &Kernel,
        grid: [u32; 3],
        args: &[KernelArg<'_, B::Memory>],
    ) -> Result<()> {
        self.backend.launch_kernel(kernel, grid, args)
    }

    /// Issues one decode step on the current stream for the `io.rows()` rows described by
    /// `io.meta()`: reads the token ids, positions, lengths and slots from there, writes each
    /// row's keys and values into `cache` at its position, the logits into `io.logits()` and
    /// the greedy next token into `io.next()`. Captured, it is the step's graph: nothing it
    /// records depends on the host values of the step. On a tensor-parallel model every rank
    /// issues it for the same step (its all-reduces meet the other ranks').
    ///
    /// Errors: `cache` or `io` made for another config (a kernel's argument check), or the
    /// backend's errors.
    pub fn forward(&self, io: &StepBuffers<B, T>, cache: &KvCache<B, T>) -> Result<()> {
        let (b, c, k) = (&self.backend, &self.config, &*self.kernels);
        let rows = io.rows();
        let _span = tracing::debug_span!("forward", rows).entered();
        // Every size was checked to fit in u32 (Config::validate, Engine::new).
        let u = |n: usize| KernelArg::scalar(n as u32);
        let per_row = |kernel: &Kernel, n: usize| kernel.grid_for(rows * n);
        let rows_grid = [rows as u32, 1, 1];
        let linear = |n: usize, k_dim: usize| Gemm::new(rows, n, k_dim).transpose_b(true);
        // 1 on one device (the residual added in the GEMM's epilogue).
        let residual = self.residual_beta();

        let x = b.alloc::<T>(rows * c.hidden)?;
        let h = b.alloc::<T>(rows * c.hidden)?;
        let qkv = b.alloc::<T>(rows * c.qkv_dim())?;
        let q = b.alloc::<T>(rows * c.q_dim())?;
        let attn = b.alloc::<T>(rows * c.q_dim())?;
        let gate_up = b.alloc::<T>(rows * 2 * c.intermediate)?;
        let act = b.alloc::<T>(rows * c.intermediate)?;
        // Long caches: attention split over chunks of positions (flash-decoding).
        let splits = c.attention_splits();
        let partials = if splits > 1 {
            Some(b.alloc::<f32>(rows * c.heads * splits * attention::partial_len(c.head_dim))?)
        } else {
            None
        };
        let norm = |out: &B::Buffer<T>, w: &B::Buffer<T>| {
            self.launch(
                &k.rmsnorm,
                rows_grid,
                &[
                    KernelArg::buffer(out),
                    KernelArg::buffer(&x),
                    KernelArg::buffer(w),
                    u(rows),
                    u(c.hidden),
                    KernelArg::scalar(c.rms_eps),
                ],
            )
        };

        self.launch(
            &k.embed,
            per_row(&k.embed, c.hidden),
            &[
                KernelArg::buffer(&x),
                KernelArg::buffer(&self.weights.embed),
                KernelArg::buffer(io.meta()),
                u(rows),
                u(c.hidden),
                u(c.vocab),
            ],
        )?;
        for (l, w) in self.weights.layers.iter().enumerate() {
            let missing = || {
                GraphError::ArgumentMismatch(format!(
                    "key/value cache has no layer {l}: made for another config"
                ))
            };
            let keys = cache.keys(l).ok_or_else(missing)?;
            let values = cache.values(l).ok_or_else(missing)?;
            norm(&h, &w.attn_norm)?;
            b.gemm(&linear(c.qkv_dim(), c.hidden), &h, &w.qkv, &qkv)?;
            self.launch(
                &k.rope_kv,
                per_row(&k.rope_kv, (c.heads + 2 * c.kv_heads) * c.head_dim / 2),
                &[
                    KernelArg::buffer(&q),
                    KernelArg::buffer(keys),
                    KernelArg::buffer(values),
                    KernelArg::buffer(&qkv),
                    KernelArg::buffer(&self.rope),
                    KernelArg::buffer(io.meta()),
                    u(rows),
                    u(c.heads),
                    u(c.kv_heads),
                    u(c.head_dim),
                    u(c.max_len),
                    u(cache.slots()),
                ],
            )?;
            let sizes = [
                u(rows),
                u(c.heads),
                u(c.kv_heads),
                u(c.head_dim),
                u(c.max_len),
                u(cache.slots()),
                KernelArg::scalar(1.0 / (c.head_dim as f32).sqrt()),
            ];
            let inputs = [
                KernelArg::buffer(&q),
                KernelArg::buffer(keys),
                KernelArg::buffer(values),
                KernelArg::buffer(io.meta()),
            ];
            match &partials {
                None => {
                    let args: Vec<_> = std::iter::once(KernelArg::buffer(&attn))
                        .chain(inputs)
                        .chain(sizes)
                        .collect();
                    self.launch(&k.attention, [c.heads as u32, rows as u32, 1], &args)?;
                }
                Some(partials) => {
                    let args: Vec<_> = std::iter::once(KernelArg::buffer(partials))
                        .chain(inputs)
                        .chain(sizes)
                        .chain([u(c.attention_chunk), u(splits)])
                        .collect();
                    self.launch(
                        &k.attention_split,
                        [c.heads as u32, rows as u32, splits as u32],
                        &args,
                    )?;
                    self.launch(
                        &k.attention_combine,
                        [c.heads as u32, rows as u32, 1],
                        &[
                            KernelArg::buffer(&attn),
                            KernelArg::buffer(partials),
                            u(rows),
                            u(c.heads),
                            u(c.head_dim),
                            u(splits),
                        ],
                    )?;
                }
            }
            b.gemm(
                &linear(c.hidden, c.q_dim()).scalars(1.0, residual),
                &attn,
                &w.out,
                &x,
            )?;
            self.reduce(&x)?;
            norm(&h, &w.mlp_norm)?;
            b.gemm(
                &linear(2 * c.intermediate, c.hidden),
                &h,
                &w.gate_up,
                &gate_up,
            )?;
            self.launch(
                &k.swiglu,
                per_row(&k.swiglu, c.intermediate),
                &[
                    KernelArg::buffer(&act),
                    KernelArg::buffer(&gate_up),
                    u(rows),
                    u(c.intermediate),
                ],
            )?;
            b.gemm(
                &linear(c.hidden, c.intermediate).scalars(1.0, residual),
                &act,
                &w.down,
                &x,
            )?;
            self.reduce(&x)?;
        }
        norm(&h, &self.weights.final_norm)?;
        b.gemm(
            &linear(c.vocab, c.hidden),
            &h,
            &self.weights.lm_head,
            io.logits(),
        )?;
        self.launch(
            &k.argmax,
            rows_grid,
            &[
                KernelArg::buffer(io.next()),
                KernelArg::buffer(io.logits()),
                u(rows),
                u(c.vocab),
            ],
        )
    }
}
