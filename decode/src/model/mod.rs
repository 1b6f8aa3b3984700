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
//! Steps of at most [`Model::fused_rows`] rows ([`default_fused_rows`] unless set) take the
//! small-batch projections of [`kernels::linear`] and [`kernels::qkv_rope`] instead of the
//! GEMMs: each RMSNorm rides in the projection after it, RoPE and the cache store in the QKV
//! projection, SwiGLU in the gate/up projection and the residuals in the output and down
//! projections, five launches per layer (six split) and three more per step. On the mock they compute what the unfused step computes, bit
//! for bit; on a GPU RMSNorm's inverse root multiplies the finished products (the normalized
//! row is not rounded to `T` first), a difference in the last bits.
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
    Backend, BackendKind, DeviceBuffer, Gemm, GraphError, Result,
    kernel::{Kernel, KernelArg},
};

pub use inputs::StepRow;
pub use kv_cache::KvCache;
pub use reference::{Reference, ReferenceStep};
pub use step_buffers::StepBuffers;
pub use weights::{HostWeights, LayerWeights, Tensor, Weights};

use crate::{Config, DecodeElement};
use kernels::{Kernels, attention, linear, qkv_rope};

/// The largest step that takes the fused small-batch projections unless
/// [`Model::set_fused_rows`] says otherwise.
///
/// On CUDA, for `bf16`, whose projections of several rows run on tensor cores there
/// ([`DecodeElement::TENSOR_CORE_TILES`]; devices of compute capability 8.0 and later), 16.
/// Measured on an H100 in one run, two rounds against `--fused-rows 0` (docs/BENCHMARKS.md):
/// the graphed step of the 2,048-wide model took 0.93–0.95× cuBLAS's at 2 to 16 rows, the
/// 1,024-wide one 0.85–0.87×; at 32 rows the tiles were 1.22× (medium) and 1.05× (small)
/// slower, where cuBLAS's wider tiles reuse each weight over more rows.
///
/// Elsewhere (f32, and HIP, whose several-row form runs on the vector units) 4 for models at most 1,024 wide, else 1. Measured on an H200 in one run against
/// `--fused-rows 0`: on the narrow model they take 35 % off a step of one row, 19 % off one of
/// two and 17 % off one of four (eight rows were 16 % slower); on the 2,048-wide model 21 %
/// off a step of one row, and steps of two and four were 3–4 % slower than cuBLAS's, which
/// reads the larger weights at the same speed for any number of rows.
///
/// ```
/// use accel_graph::BackendKind;
/// use accel_graph_decode::{Config, model::default_fused_rows};
/// use half::bf16;
/// let (small, medium) = (Config::small_0_5b(), Config::medium_1_5b());
/// assert_eq!(default_fused_rows::<bf16>(&medium, BackendKind::Cuda), 16);
/// assert_eq!(default_fused_rows::<bf16>(&medium, BackendKind::Hip), 1);
/// assert_eq!(default_fused_rows::<f32>(&small, BackendKind::Cuda), 4);
/// assert_eq!(default_fused_rows::<f32>(&medium, BackendKind::Cuda), 1);
/// ```
pub fn default_fused_rows<T: DecodeElement>(config: &Config, backend: BackendKind) -> usize {
    if T::TENSOR_CORE_TILES && backend == BackendKind::Cuda {
        TENSOR_CORE_FUSED_ROWS
    } else if config.hidden <= 1024 {
        4
    } else {
        1
    }
}

/// [`default_fused_rows`] of an element type whose projections run on tensor cores.
const TENSOR_CORE_FUSED_ROWS: usize = 16;

/// The largest step that launches its kernels to overlap the kernel before each unless
/// [`Model::set_overlap_rows`] says otherwise: 0, none. Measured on an H200 in one run, two
/// rounds against the same steps in stream order (docs/BENCHMARKS.md): at batch 1 the
/// `medium` step took 1,334 against 1,325 µs and the `small` one 700 against 713 µs — the
/// graph already issues its kernels back to back, and a kernel can do nothing useful before
/// its predecessor's output is ready (asking its weights into L2 first made the `medium` step
/// 5 % slower).
pub const DEFAULT_OVERLAP_ROWS: usize = 0;

/// The model on backend `B` with elements `T`: its weights in device memory, its RoPE table
/// and its kernels (compiled when the model is made, so no capture compiles them).
#[derive(Debug)]
pub struct Model<B: Backend, T: DecodeElement> {
    backend: B,
    config: Config,
    weights: Weights<B::Buffer<T>>,
    rope: B::Buffer<f32>,
    kernels: Arc<Kernels>,
    /// The same kernels launched to overlap the kernel before them.
    overlapped: Arc<Kernels>,
    /// Steps of at most this many rows take the fused small-batch projections.
    fused_rows: usize,
    /// Steps of at most this many rows launch [`Model::overlapped`]'s kernels.
    overlap_rows: usize,
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
        let (kernels, overlapped) = (Kernels::get::<T>(), Kernels::overlapped::<T>());
        // The overlapped set is compiled when a step is set to take it.
        for kernel in kernels.all() {
            backend.prepare_kernel(kernel)?;
        }
        Ok(Model {
            backend: backend.clone(),
            rope: backend.alloc_from(&kernels::rope::table(&config))?,
            config,
            weights,
            kernels,
            overlapped,
            fused_rows: default_fused_rows::<T>(&config, backend.kind()),
            overlap_rows: DEFAULT_OVERLAP_ROWS,
            shard: None,
        })
    }

    /// Steps of at most this many rows run the fused small-batch projections
    /// ([`kernels::linear`]); larger ones the backend's GEMM with RMSNorm and SwiGLU apart.
    /// [`default_fused_rows`] unless set.
    pub fn fused_rows(&self) -> usize {
        self.fused_rows
    }

    /// Sets [`Model::fused_rows`]: 0 runs every step through the GEMMs. At most
    /// [`kernels::linear::MAX_ROWS`] times 64 (the projections take larger steps
    /// [`kernels::linear::MAX_ROWS`] rows at a time, re-reading the weights for each) — past that,
    /// [`GraphError::ArgumentMismatch`]. Set it before capturing: a captured graph keeps the
    /// launches it recorded.
    ///
    /// ```
    /// use accel_graph::BackendKind;
    /// use accel_graph_decode::{Config, model::{Model, default_fused_rows}};
    /// let b = accel_graph::mock::MockBackend::new();
    /// let mut model = Model::<_, f32>::random(&b, Config::tiny(), 1)?;
    /// assert_eq!(model.fused_rows(), default_fused_rows::<f32>(&Config::tiny(), BackendKind::Mock));
    /// assert_eq!(model.launches_per_step(1), 5 * 2 + 3);
    /// model.set_fused_rows(0)?;
    /// assert_eq!(model.launches_per_step(1), 9 * 2 + 4);
    /// assert!(model.set_fused_rows(100_000).is_err());
    /// # Ok::<(), accel_graph::GraphError>(())
    /// ```
    pub fn set_fused_rows(&mut self, rows: usize) -> Result<()> {
        let most = linear::MAX_ROWS * 64;
        if rows > most {
            return Err(GraphError::ArgumentMismatch(format!(
                "fused rows {rows}: at most {most}"
            )));
        }
        self.fused_rows = rows;
        Ok(())
    }

    /// Steps of at most this many rows launch every kernel to overlap the kernel before it
    /// where the device can ([`Kernels::overlapped`]: CUDA's programmatic dependent launch,
    /// compute capability 9.0 and later; elsewhere it changes nothing). [`DEFAULT_OVERLAP_ROWS`]
    /// unless set.
    pub fn overlap_rows(&self) -> usize {
        self.overlap_rows
    }

    /// Sets [`Model::overlap_rows`] (0: no step overlaps its kernels), compiling the
    /// overlapped kernels the first time it is set above 0 (errors: as [`Model::random`]'s for
    /// the kernels). Set it before capturing: a captured graph keeps the launches it was
    /// captured with.
    ///
    /// ```
    /// use accel_graph_decode::{Config, model::{DEFAULT_OVERLAP_ROWS, Model}};
    /// let backend = accel_graph::mock::MockBackend::new();
    /// let mut model = Model::<_, f32>::random(&backend, Config::tiny(), 1)?;
    /// assert_eq!(model.overlap_rows(), DEFAULT_OVERLAP_ROWS);
    /// model.set_overlap_rows(1)?;
    /// assert_eq!(model.overlap_rows(), 1);
    /// # Ok::<(), accel_graph::GraphError>(())
    /// ```
    pub fn set_overlap_rows(&mut self, rows: usize) -> Result<()> {
        if rows > 0 {
            for kernel in self.overlapped.all() {
                self.backend.prepare_kernel(kernel)?;
            }
        }
        self.overlap_rows = rows;
        Ok(())
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

    /// Launches a step of `rows` rows issues: nine per layer (ten where attention is split
    /// over chunks of a long cache) and four more; with the fused projections (at most
    /// [`Model::fused_rows`] rows) five per layer (six split) and three more.
    pub fn launches_per_step(&self, rows: usize) -> usize {
        let split = usize::from(self.config.attention_splits() > 1);
        if rows <= self.fused_rows {
            (5 + split) * self.config.layers + 3
        } else {
            (9 + split) * self.config.layers + 4
        }
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
        let rows = io.rows();
        let k = if rows <= self.overlap_rows {
            &*self.overlapped
        } else {
            &*self.kernels
        };
        let (b, c) = (&self.backend, &self.config);
        let _span = tracing::debug_span!("forward", rows).entered();
        // Every size was checked to fit in u32 (Config::validate, Engine::new).
        let u = |n: usize| KernelArg::scalar(n as u32);
        let per_row = |kernel: &Kernel, n: usize| kernel.grid_for(rows * n);
        let rows_grid = [rows as u32, 1, 1];
        let linear = |n: usize, k_dim: usize| Gemm::new(rows, n, k_dim).transpose_b(true);
        // 1 on one device (the residual added in the GEMM's epilogue).
        let residual = self.residual_beta();
        let fused = rows <= self.fused_rows;
        let projections = k.projections(rows);

        let x = b.alloc::<T>(rows * c.hidden)?;
        let q = b.alloc::<T>(rows * c.q_dim())?;
        let attn = b.alloc::<T>(rows * c.q_dim())?;
        let act = b.alloc::<T>(rows * c.intermediate)?;
        // The unfused step's normalized rows, gate/up products and QKV projection (none when
        // fused).
        let unfused = if fused {
            None
        } else {
            Some((
                b.alloc::<T>(rows * c.hidden)?,
                b.alloc::<T>(rows * 2 * c.intermediate)?,
                b.alloc::<T>(rows * c.qkv_dim())?,
            ))
        };
        // Long caches: attention split over chunks of positions (flash-decoding).
        let splits = c.attention_splits();
        let partials = if splits > 1 {
            Some(b.alloc::<f32>(rows * c.heads * splits * attention::partial_len(c.head_dim))?)
        } else {
            None
        };
        // out = rmsnorm(x) · w_norm · Wᵀ (n columns): fused, or RMSNorm then the GEMM.
        let norm_linear = |out: &B::Buffer<T>, norm: &B::Buffer<T>, w: &B::Buffer<T>, n: usize| {
            if let Some((h, _, _)) = &unfused {
                k.issue_rmsnorm(b, h, &x, norm, rows, c.hidden, c.rms_eps)?;
                return b.gemm(&linear(n, c.hidden), h, w, out);
            }
            projections.issue_norm_linear(b, out, &x, norm, w, rows, n, c.hidden, c.rms_eps)
        };
        // x = input · Wᵀ + residual · x (k_dim wide input): fused, or the GEMM.
        let residual_linear = |input: &B::Buffer<T>, w: &B::Buffer<T>, k_dim: usize| {
            if unfused.is_some() {
                return b.gemm(
                    &linear(c.hidden, k_dim).scalars(1.0, residual),
                    input,
                    w,
                    &x,
                );
            }
            projections.issue_linear(b, &x, input, w, rows, c.hidden, k_dim, residual)
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
            // The heads and the cache's shape, as RoPE's store and attention take them.
            let heads_and_cache = [
                u(c.heads),
                u(c.kv_heads),
                u(c.head_dim),
                u(c.max_len),
                u(cache.slots()),
            ];
            if let Some((_, _, qkv)) = &unfused {
                norm_linear(qkv, &w.attn_norm, &w.qkv, c.qkv_dim())?;
                self.launch(
                    &k.rope_kv,
                    per_row(&k.rope_kv, (c.heads + 2 * c.kv_heads) * c.head_dim / 2),
                    &[
                        &[
                            KernelArg::buffer(&q),
                            KernelArg::buffer(keys),
                            KernelArg::buffer(values),
                            KernelArg::buffer(qkv),
                            KernelArg::buffer(&self.rope),
                            KernelArg::buffer(io.meta()),
                            u(rows),
                        ][..],
                        &heads_and_cache,
                    ]
                    .concat(),
                )?;
            } else {
                self.launch(
                    &projections.norm_qkv_rope,
                    qkv_rope::grid(
                        projections.variant,
                        c.heads,
                        c.kv_heads,
                        c.head_dim,
                        c.hidden,
                    ),
                    &[
                        &[
                            KernelArg::buffer(&q),
                            KernelArg::buffer(keys),
                            KernelArg::buffer(values),
                            KernelArg::buffer(&x),
                            KernelArg::buffer(&w.attn_norm),
                            KernelArg::buffer(&w.qkv),
                            KernelArg::buffer(&self.rope),
                            KernelArg::buffer(io.meta()),
                            u(rows),
                            u(c.qkv_dim()),
                            u(c.hidden),
                        ][..],
                        &heads_and_cache,
                        &[KernelArg::scalar(c.rms_eps)],
                    ]
                    .concat(),
                )?;
            }
            let sizes = [
                &[u(rows)][..],
                &heads_and_cache,
                &[KernelArg::scalar(1.0 / (c.head_dim as f32).sqrt())],
            ]
            .concat();
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
            residual_linear(&attn, &w.out, c.q_dim())?;
            self.reduce(&x)?;
            if let Some((_, gate_up, _)) = &unfused {
                norm_linear(gate_up, &w.mlp_norm, &w.gate_up, 2 * c.intermediate)?;
                k.issue_swiglu(b, &act, gate_up, rows, c.intermediate)?;
            } else {
                projections.issue_norm_gate_up(
                    b,
                    &act,
                    &x,
                    &w.mlp_norm,
                    &w.gate_up,
                    rows,
                    c.intermediate,
                    c.hidden,
                    c.rms_eps,
                )?;
            }
            residual_linear(&act, &w.down, c.intermediate)?;
            self.reduce(&x)?;
        }
        norm_linear(
            io.logits(),
            &self.weights.final_norm,
            &self.weights.lm_head,
            c.vocab,
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
