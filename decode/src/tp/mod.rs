//! Tensor parallelism, Megatron style: the model split over `world` ranks, one device each.
//!
//! ```text
//! rank r of world:   heads r·h..(r+1)·h, kv heads likewise (or replicated), MLP columns r·i..(r+1)·i
//! x = embed[token]                                    whole on every rank
//! per layer:
//!     qkv_r = rmsnorm(x) · Wqkv_rᵀ                    column-parallel: this rank's heads' rows
//!     a_r   = attention(q_r, cache_r)                 this rank's heads, its own cache
//!     x     = all_reduce(a_r · Wo_rᵀ + [r = 0]·x)     row-parallel: this rank's columns, summed
//!     gu_r  = rmsnorm(x) · Wgu_rᵀ                     column-parallel: its gate and up rows
//!     x     = all_reduce(swiglu(gu_r) · Wdown_rᵀ + [r = 0]·x)
//! logits = rmsnorm(x) · Wheadᵀ, next = argmax         whole on every rank
//! ```
//!
//! Each rank holds its part of the weights ([`Partition`]: sliced from the whole model's, so
//! the ranks together are the one-device model) and a cache of its key/value heads only. The
//! residual rides on rank 0's GEMM epilogue (`beta = 1`, as on one device); the other ranks
//! write their bare partial products (`beta = 0`), and the all-reduce (sum) of the residual
//! stream adds them: the same launches as one device plus two all-reduces per layer, issued
//! on the current stream and so **captured inside each bucket's graph**.
//!
//! The embedding, the norms and the LM head are replicated: after each all-reduce every rank
//! holds the same residual stream, so every rank computes the same logits and samples the
//! same token with no further collective. A vocabulary-parallel LM head would save each rank
//! `(world − 1)/world` of the head's GEMM but needs an all-gather of the logits and an argmax
//! over the gathered `[world][rows][vocab/world]` layout; replicated is the simplest correct
//! choice, and every rank can answer a step by itself.
//!
//! More ranks than key/value heads (`world` a multiple of `kv_heads`): each key/value head is
//! held by `world / kv_heads` ranks, those whose query heads attend to it (vLLM's rule).
//! Sizes that do not split — `heads` or `intermediate` not a multiple of `world`, `kv_heads`
//! neither a multiple nor a divisor of it — are [`TpError::Indivisible`].
//!
//! Sums split over ranks round differently from one device's: the split model equals its own
//! host reference ([`TpReference`]) bit for bit on the mock, and the one-device model within
//! rounding. [`TpThreads`] runs the ranks as threads, each with its own [`Engine`](crate::Engine).

mod error;
mod partition;
mod reference;
mod threads;

pub use error::{Dimension, TpError};
pub use partition::Partition;
pub use reference::TpReference;
pub use threads::{TpRank, TpThreads};
