//! Objects made elsewhere, handed to a backend: a driver stream another library created, and
//! device memory it allocated. The backend crate checks that they belong to its device; this
//! layer gives them the same rules as its own (capture membership, keep-alive, frees).

use std::sync::{Arc, Mutex, Weak};

use accel_graph_api::{Element, GraphError, Result, backend_kit::pools::OwnedAllocation};

use super::DriverBackend;
use crate::{Driver, DriverBuffer, DriverStream, stream::StreamInner};

/// The streams [`DriverBackend::wrap_stream`] made, so that a raw stream wrapped twice is one
/// stream of the backend: capture membership lives in the wrapper, and two wrappers of one
/// raw stream would each miss the captures begun through the other.
struct WrappedStreams<D: Driver>(Mutex<Vec<Weak<StreamInner<D>>>>);

impl<D: Driver> Default for WrappedStreams<D> {
    fn default() -> Self {
        WrappedStreams(Mutex::new(Vec::new()))
    }
}

impl<D: Driver> DriverBackend<D> {
    /// A stream of this backend over `raw`, a stream of the driver's device that another
    /// library made (the backend crate checks that it belongs to the device, and its own
    /// `unsafe` raw constructors state their contracts). Work issued on it follows the
    /// backend's rules, captures included. Wrapping the same raw stream again while a wrapper
    /// of it lives returns that stream, and the device's default stream is the backend's
    /// default stream. A stream capturing now is refused with [`GraphError::Unsupported`]: its
    /// capture was begun outside the backend, which could not keep alive the memory of the
    /// work captured into it.
    pub fn wrap_stream(&self, raw: D::Stream) -> Result<DriverStream<D>> {
        let shared = &self.shared;
        shared.bind()?;
        let capturing = shared.check(
            shared.driver.capture_id(&raw),
            crate::errors::CallSite::op("wrap_stream"),
        )?;
        if capturing.is_some() {
            return Err(GraphError::Unsupported {
                what: "adopting a stream that is capturing: the capture was begun outside the \
                       backend; end it, then begin captures through the backend \
                       (capture_begin, capture_on)"
                    .to_owned(),
            });
        }
        let key = shared.driver.stream_key(&raw);
        let default = shared.current.default_stream();
        if key == default.key() {
            return Ok(default.clone());
        }
        let new = |raw| {
            DriverStream::new(
                &*shared.driver,
                raw,
                shared.id,
                shared.pools.order().new_stream(),
            )
        };
        // Infallible: the registry is made empty.
        let registry = shared
            .cache
            .get_or_try_init(|| Ok(WrappedStreams::<D>::default()));
        let Ok(registry) = registry else {
            return Ok(new(raw));
        };
        let mut wrapped = registry.0.lock().unwrap_or_else(|e| e.into_inner());
        wrapped.retain(|stream| stream.strong_count() > 0);
        if let Some(inner) = wrapped
            .iter()
            .filter_map(Weak::upgrade)
            .find(|inner| inner.key == key)
        {
            return Ok(DriverStream { inner });
        }
        let stream = new(raw);
        wrapped.push(Arc::downgrade(&stream.inner));
        Ok(stream)
    }

    /// A buffer of `len` elements over `block`, device memory another library allocated and
    /// hands over: from now on it is the backend's, kept alive by the graphs whose captured
    /// work uses it and freed through the driver's [`free`](crate::api::DriverMemory::free)
    /// once nothing uses it, like a plain allocation.
    ///
    /// # Safety
    /// `block` must be a live allocation of the driver's device of at least
    /// `len * size_of::<T>()` bytes, which the driver's `free` releases correctly, and nothing
    /// else may free it or still use it unordered with the backend's work.
    pub unsafe fn adopt_block<T: Element>(
        &self,
        block: D::Block,
        len: usize,
    ) -> Result<DriverBuffer<D, T>> {
        let shared = &self.shared;
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(GraphError::size_overflow(shared.name()))?;
        let allocation = shared.pools.adopt_plain((block, bytes), bytes);
        Ok(DriverBuffer::new(
            shared,
            OwnedAllocation::new(&shared.pools, allocation),
            len,
        ))
    }
}
