//! `DriverStream`: a stream of one backend instance, with the capture it takes part in.

use std::{
    fmt,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use crate::{Driver, capture::CaptureEntry};

/// A stream of a driver-based backend. Clones name the same stream; the last clone releases
/// it.
pub struct DriverStream<D: Driver> {
    pub(crate) inner: Arc<StreamInner<D>>,
}

pub(crate) struct StreamInner<D: Driver> {
    pub(crate) raw: D::Stream,
    pub(crate) key: u64,
    pub(crate) instance: u64,
    pub(crate) is_default: bool,
    /// Fast path of `capture`: most ops run on streams that are not capturing.
    capturing: AtomicBool,
    capture: Mutex<Option<Arc<CaptureEntry<D>>>>,
}

impl<D: Driver> StreamInner<D> {
    /// The capture this stream takes part in, if any.
    #[inline]
    pub(crate) fn capture(&self) -> Option<Arc<CaptureEntry<D>>> {
        if !self.capturing.load(Ordering::Acquire) {
            return None;
        }
        self.capture
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn set_capture(&self, entry: Option<Arc<CaptureEntry<D>>>) {
        let mut slot = self.capture.lock().unwrap_or_else(|e| e.into_inner());
        self.capturing.store(entry.is_some(), Ordering::Release);
        *slot = entry;
    }

    /// Leaves `entry`'s capture, if this stream is still in it.
    pub(crate) fn leave_capture(&self, entry: &Arc<CaptureEntry<D>>) {
        let mut slot = self.capture.lock().unwrap_or_else(|e| e.into_inner());
        if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, entry)) {
            *slot = None;
            self.capturing.store(false, Ordering::Release);
        }
    }
}

impl<D: Driver> DriverStream<D> {
    pub(crate) fn new(driver: &D, raw: D::Stream, instance: u64) -> Self {
        DriverStream {
            inner: Arc::new(StreamInner {
                key: driver.stream_key(&raw),
                is_default: driver.is_default_stream(&raw),
                raw,
                instance,
                capturing: AtomicBool::new(false),
                capture: Mutex::new(None),
            }),
        }
    }

    /// The driver's stream, for native work issued on it (see the backend's documentation for
    /// what is captured and what the caller must keep alive).
    pub fn raw(&self) -> &D::Stream {
        &self.inner.raw
    }

    /// True for the default stream.
    pub fn is_default(&self) -> bool {
        self.inner.is_default
    }

    /// The [`Backend::instance_id`](accel_graph_api::Backend::instance_id) of the backend the
    /// stream belongs to.
    pub fn instance_id(&self) -> u64 {
        self.inner.instance
    }

    /// The driver's key of the stream (its raw handle).
    pub fn key(&self) -> u64 {
        self.inner.key
    }
}

impl<D: Driver> Clone for DriverStream<D> {
    fn clone(&self) -> Self {
        DriverStream {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<D: Driver> PartialEq for DriverStream<D> {
    fn eq(&self, other: &Self) -> bool {
        self.inner.instance == other.inner.instance && self.inner.key == other.inner.key
    }
}

impl<D: Driver> Eq for DriverStream<D> {}

impl<D: Driver> fmt::Debug for DriverStream<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("backend", &D::KIND)
            .field("key", &format_args!("{:#x}", self.inner.key))
            .field("default", &self.inner.is_default)
            .field("instance", &self.inner.instance)
            .finish()
    }
}
