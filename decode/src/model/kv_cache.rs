//! [`KvCache`]: the static key/value cache, preallocated for `slots` sequences of up to
//! `max_len` positions each.

use accel_graph::{Backend, DeviceBuffer, GraphError, Result};

use crate::{Config, DecodeElement};

/// The keys and the values of every layer, one device buffer each, laid out
/// `[slots][kv_heads][max_len][head_dim]`: a sequence owns one slot, and its position `p` of
/// head `h` is the `head_dim` elements at `((slot · kv_heads + h) · max_len + p) · head_dim`.
///
/// The memory is allocated once and never cleared: a step attends only to positions a
/// sequence wrote in earlier steps (the [`Engine`](crate::Engine) refuses a position past
/// those), so stale contents of a reused slot are never read.
#[derive(Debug)]
pub struct KvCache<B: Backend, T: DecodeElement> {
    keys: Vec<B::Buffer<T>>,
    values: Vec<B::Buffer<T>>,
    slots: usize,
}

impl<B: Backend, T: DecodeElement> KvCache<B, T> {
    /// A cache of `slots` sequences for `config` on `backend`. Errors: no slot, or a layer's
    /// buffer beyond 2³² elements ([`GraphError::ArgumentMismatch`]), or the device's memory
    /// ([`GraphError::OutOfMemory`]).
    pub fn new(backend: &B, config: &Config, slots: usize) -> Result<Self> {
        let len = Self::layer_len(config, slots)?;
        let mut keys = Vec::with_capacity(config.layers);
        let mut values = Vec::with_capacity(config.layers);
        for _ in 0..config.layers {
            keys.push(backend.alloc::<T>(len)?);
            values.push(backend.alloc::<T>(len)?);
        }
        Ok(KvCache {
            keys,
            values,
            slots,
        })
    }

    /// Elements of one layer's keys (or values) for `slots` sequences.
    pub fn layer_len(config: &Config, slots: usize) -> Result<usize> {
        let len = [config.kv_heads, config.max_len, config.head_dim]
            .into_iter()
            .try_fold(slots, usize::checked_mul)
            .filter(|&n| n <= u32::MAX as usize);
        match len {
            Some(n) if slots > 0 => Ok(n),
            _ => Err(GraphError::ArgumentMismatch(format!(
                "key/value cache: {slots} slots of {} positions do not fit a layer buffer of \
                 at most 2^32 elements (or no slot)",
                config.max_len
            ))),
        }
    }

    /// Sequences the cache holds.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Layer `layer`'s keys.
    pub fn keys(&self, layer: usize) -> Option<&B::Buffer<T>> {
        self.keys.get(layer)
    }

    /// Layer `layer`'s values.
    pub fn values(&self, layer: usize) -> Option<&B::Buffer<T>> {
        self.values.get(layer)
    }

    /// Bytes of device memory the cache holds.
    pub fn bytes(&self) -> usize {
        self.keys
            .iter()
            .chain(&self.values)
            .map(DeviceBuffer::num_bytes)
            .sum()
    }
}
