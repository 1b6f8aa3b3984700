//! [`StepBuffers`]: the static device buffers of one step size — what the host writes before a
//! step and reads after it, at fixed addresses so a captured graph can be replayed for every
//! step.

use accel_graph::{Backend, DeviceBuffer, Result};

use crate::{Config, DecodeElement, model::inputs::FIELDS};

/// The per-step input buffer ([`super::inputs`]) and the outputs — logits and next tokens — of
/// a step of `rows` rows.
#[derive(Debug)]
pub struct StepBuffers<B: Backend, T: DecodeElement> {
    rows: usize,
    meta: B::Buffer<u32>,
    logits: B::Buffer<T>,
    next: B::Buffer<u32>,
}

impl<B: Backend, T: DecodeElement> StepBuffers<B, T> {
    /// Buffers for steps of `rows` rows of `config`'s model (allocated now, outside any
    /// capture). The per-step input holds padding rows until the first upload.
    pub fn new(backend: &B, config: &Config, rows: usize) -> Result<Self> {
        let meta = backend.alloc_from(&vec![0u32; FIELDS * rows])?;
        Ok(StepBuffers {
            rows,
            meta,
            logits: backend.alloc::<T>(rows * config.vocab)?,
            next: backend.alloc::<u32>(rows)?,
        })
    }

    /// Rows of a step.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The per-step input: token ids, positions, lengths and slots of each row.
    pub fn meta(&self) -> &B::Buffer<u32> {
        &self.meta
    }

    /// The logits, `[rows, vocab]`.
    pub fn logits(&self) -> &B::Buffer<T> {
        &self.logits
    }

    /// The next token of each row.
    pub fn next(&self) -> &B::Buffer<u32> {
        &self.next
    }

    /// Bytes of device memory these buffers hold.
    pub fn bytes(&self) -> usize {
        self.meta.num_bytes() + self.logits.num_bytes() + self.next.num_bytes()
    }
}
