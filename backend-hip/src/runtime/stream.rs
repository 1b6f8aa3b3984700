//! Streams and events: thin owners of `hipStream_t` / `hipEvent_t`.

use std::sync::Arc;

use accel_graph_api::{GraphError, Result};

use super::{
    error,
    ffi::{self, Handle},
};

/// A HIP stream of one backend instance. Clones name the same stream; the last clone destroys
/// it. The default stream is HIP's null stream, which cannot be captured.
#[derive(Clone)]
pub struct HipStream {
    inner: Arc<StreamInner>,
}

struct StreamInner {
    raw: Handle<ffi::ihipStream_t>,
    instance: u64,
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        if self.raw.is_null() {
            return;
        }
        // SAFETY: the stream was created by hipStreamCreateWithFlags and this is its last owner.
        let err = unsafe { ffi::hipStreamDestroy(self.raw.0) };
        if !error::is_success(err) {
            tracing::warn!(error = %error::name_of(err), "hipStreamDestroy failed");
        }
    }
}

impl HipStream {
    /// The null stream of backend `instance`.
    pub(crate) fn null(instance: u64) -> Self {
        HipStream {
            inner: Arc::new(StreamInner {
                raw: Handle::null(),
                instance,
            }),
        }
    }

    /// A new non-blocking stream: it does not synchronize implicitly with the null stream, so
    /// work on the null stream never touches a capture running on it.
    pub(crate) fn create(instance: u64) -> Result<Self> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        let err = unsafe { ffi::hipStreamCreateWithFlags(&mut raw, ffi::hipStreamNonBlocking) };
        if !error::is_success(err) {
            return Err(error::driver(err, "new_stream (hipStreamCreateWithFlags)"));
        }
        Ok(HipStream {
            inner: Arc::new(StreamInner {
                raw: Handle(raw),
                instance,
            }),
        })
    }

    /// The raw `hipStream_t` (null for the default stream), for native work issued on it.
    pub fn raw(&self) -> ffi::hipStream_t {
        self.inner.raw.0
    }

    /// True for the default (null) stream.
    pub fn is_default(&self) -> bool {
        self.inner.raw.is_null()
    }

    pub(crate) fn check(&self, instance: u64) -> Result<()> {
        if self.inner.instance == instance {
            Ok(())
        } else {
            Err(GraphError::ForeignObject { what: "stream" })
        }
    }
}

impl PartialEq for HipStream {
    fn eq(&self, other: &Self) -> bool {
        self.inner.instance == other.inner.instance && self.inner.raw == other.inner.raw
    }
}

impl std::fmt::Debug for HipStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_default() {
            f.write_str("HipStream(default)")
        } else {
            write!(f, "HipStream({:p})", self.inner.raw.0)
        }
    }
}

/// A HIP event (timing disabled), for fork/join across streams.
pub struct HipEvent {
    raw: Handle<ffi::ihipEvent_t>,
    instance: u64,
}

impl HipEvent {
    pub(crate) fn create(instance: u64) -> Result<Self> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        let err = unsafe { ffi::hipEventCreateWithFlags(&mut raw, ffi::hipEventDisableTiming) };
        if !error::is_success(err) {
            return Err(error::driver(err, "new_event (hipEventCreateWithFlags)"));
        }
        Ok(HipEvent {
            raw: Handle(raw),
            instance,
        })
    }

    /// The raw `hipEvent_t`.
    pub fn raw(&self) -> ffi::hipEvent_t {
        self.raw.0
    }

    pub(crate) fn check(&self, instance: u64) -> Result<()> {
        if self.instance == instance {
            Ok(())
        } else {
            Err(GraphError::ForeignObject { what: "event" })
        }
    }
}

impl Drop for HipEvent {
    fn drop(&mut self) {
        // SAFETY: the event was created by hipEventCreateWithFlags and is destroyed once.
        let err = unsafe { ffi::hipEventDestroy(self.raw.0) };
        if !error::is_success(err) {
            tracing::warn!(error = %error::name_of(err), "hipEventDestroy failed");
        }
    }
}

impl std::fmt::Debug for HipEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HipEvent({:p})", self.raw.0)
    }
}
