//! HIP streams: owners of `hipStream_t`s.

use accel_graph_driver::{DriverResult, api::DriverStreams};

use crate::{
    HipDevice,
    error::{check, error, name_of},
    ffi,
};

/// A HIP stream of the backend (the driver-level object behind a [`crate::HipStream`]). The
/// default stream is HIP's null stream, which cannot be captured; new streams are
/// non-blocking, so work on the null stream never touches a capture running on them.
#[derive(Debug)]
pub struct HStream {
    raw: ffi::hipStream_t,
    /// Destroyed on drop: false for the null stream and for streams adopted from the caller.
    owned: bool,
}

// SAFETY: a hipStream_t is a process-wide runtime handle that any host thread may use; the
// wrapper only carries the pointer and destroys the stream once, on drop.
unsafe impl Send for HStream {}
// SAFETY: as above; nothing is mutated through `&HStream`.
unsafe impl Sync for HStream {}

impl HStream {
    /// A new non-blocking stream.
    pub(crate) fn create() -> DriverResult<Self> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is a local out-parameter.
        let err = unsafe { ffi::hipStreamCreateWithFlags(&mut raw, ffi::hipStreamNonBlocking) };
        check(err, "hipStreamCreateWithFlags")?;
        Ok(HStream { raw, owned: true })
    }

    /// The caller's stream `raw`, never destroyed by the backend; `None` for the null stream
    /// (the backend's default stream already stands for it).
    pub(crate) fn borrowed(raw: ffi::hipStream_t) -> Option<Self> {
        (!raw.is_null()).then_some(HStream { raw, owned: false })
    }

    /// The raw `hipStream_t` (null for the default stream), for native work: it is captured
    /// when the stream is. Do not destroy it, and do not begin captures on it or make it wait
    /// on events through the raw handle (the backend must see every capture its streams take
    /// part in, to keep their memory alive); memory your own captured work touches must
    /// outlive every replay of the graph.
    pub fn raw(&self) -> ffi::hipStream_t {
        self.raw
    }
}

impl Drop for HStream {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // SAFETY: the stream was created by `create` and this is its only owner (the driver
        // layer shares it behind an `Arc`).
        let err = unsafe { ffi::hipStreamDestroy(self.raw) };
        if err != ffi::hipError_t::hipSuccess {
            tracing::warn!(error = %name_of(err), "hipStreamDestroy failed");
        }
    }
}

impl DriverStreams for HipDevice {
    type Stream = HStream;

    fn default_stream(&self) -> HStream {
        HStream {
            raw: std::ptr::null_mut(),
            owned: false,
        }
    }

    fn create_stream(&self) -> DriverResult<HStream> {
        HStream::create()
    }

    fn stream_key(&self, stream: &HStream) -> u64 {
        stream.raw as u64
    }

    fn is_default_stream(&self, stream: &HStream) -> bool {
        stream.raw.is_null()
    }

    fn stream_synchronize(&self, stream: &HStream) -> DriverResult<()> {
        // SAFETY: the stream is alive (the handle holds it).
        check(
            unsafe { ffi::hipStreamSynchronize(stream.raw) },
            "hipStreamSynchronize",
        )
    }

    fn capture_id(&self, stream: &HStream) -> DriverResult<Option<u64>> {
        // The null stream cannot capture, and querying it while another thread captures in
        // global mode may itself fail (hipErrorStreamCaptureImplicit): it is never asked.
        if stream.raw.is_null() {
            return Ok(None);
        }
        let mut status = ffi::hipStreamCaptureStatus::hipStreamCaptureStatusNone;
        let mut id = 0;
        // SAFETY: live stream, local out-parameters.
        let err = unsafe { ffi::hipStreamGetCaptureInfo(stream.raw, &mut status, &mut id) };
        if err != ffi::hipError_t::hipSuccess {
            return Err(error(err, "hipStreamGetCaptureInfo"));
        }
        Ok((status != ffi::hipStreamCaptureStatus::hipStreamCaptureStatusNone).then_some(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adopted_streams_are_never_the_null_stream_nor_destroyed() {
        assert!(HStream::borrowed(std::ptr::null_mut()).is_none());
        // A non-null handle that is no stream at all: dropping the wrapper must not reach the
        // runtime (it would be hipStreamDestroy on garbage).
        let fake = std::ptr::NonNull::<ffi::ihipStream_t>::dangling().as_ptr();
        let adopted = HStream::borrowed(fake).expect("a non-null handle");
        assert_eq!(adopted.raw(), fake);
        assert!(!adopted.owned);
        drop(adopted);
    }
}
