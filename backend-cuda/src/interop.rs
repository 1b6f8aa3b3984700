//! Working with cudarc users' own objects: their context ([`CudaBackend::from_context`]), their
//! streams ([`CudaBackend::adopt_stream`]), their `CudaSlice`s handed over
//! ([`CudaBackend::adopt_slice`]), and the backend's buffers lent to cudarc's launch builder and
//! cuBLAS wrappers ([`CudaBackend::lend`]) with the memory kept alive by the graphs that
//! capture the work.

use std::{fmt, marker::PhantomData, sync::Arc};

use accel_graph_api::{Backend, DeviceBuffer, Element, GraphError, Result, View};
use accel_graph_driver::BufferMemory;
use cudarc::driver::{
    CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, LaunchArgs, PushKernelArg,
    SyncOnDrop, sys,
};

use crate::{CuBlock, CuStream, CudaBackend, CudaBuffer, CudaDevice, CudaStreamHandle};

impl CudaBackend {
    /// The user's cudarc stream as a stream of the backend: set it current
    /// ([`Backend::use_stream`](accel_graph_api::Backend)), capture on it
    /// ([`Backend::capture_on`](accel_graph_api::Backend)) — the portable ops and the user's
    /// own cudarc work on it then land in one graph. The stream must belong to the backend's
    /// context, else [`GraphError::ForeignObject`]. cudarc's default stream is the backend's
    /// default stream, and adopting one stream twice gives one stream.
    ///
    /// The user keeps their cudarc handle, so cudarc could begin a capture on the stream, or
    /// fork it into one, behind the backend's back; the backend asks the driver before each
    /// call on an adopted stream, and refuses work on one that takes part in a capture the
    /// backend did not see it join ([`GraphError::Unsupported`]) — such a graph would not keep
    /// the work's memory alive.
    pub fn adopt_stream(&self, stream: Arc<CudaStream>) -> Result<CudaStreamHandle> {
        if stream.context().cu_ctx() != self.driver().ctx.cu_ctx() {
            return Err(GraphError::ForeignObject { what: "stream" });
        }
        self.wrap_stream(CuStream::external(stream))
    }

    /// Takes ownership of the user's `CudaSlice`: the memory becomes a buffer of the backend,
    /// kept alive by the graphs whose captured work uses it and freed once nothing uses it,
    /// like one the backend allocated. No copy is made.
    ///
    /// The backend's work on the memory may come on any of its streams, so the adoption waits
    /// for the work queued on the slice's stream (with cudarc's event tracking on, the
    /// slice's recorded uses on other streams are ordered before that) — a synchronization,
    /// refused with the slice handed back ([`AdoptError`]) while the stream captures, or
    /// while the capture rules forbid it (another thread's capture in global mode). A slice of
    /// another context is [`GraphError::ForeignObject`].
    ///
    /// cudarc allocates with `cuMemAllocAsync` where the device supports it; the backend frees
    /// adopted memory with `cuMemFree` after a context synchronization (which that free does
    /// not do by itself for such memory), at a point where no capture runs.
    // The error hands the slice back (no copy); adoption failing is the rare path.
    #[allow(clippy::result_large_err)]
    pub fn adopt_slice<T: Element>(
        &self,
        slice: CudaSlice<T>,
    ) -> std::result::Result<CudaBuffer<T>, AdoptError<T>> {
        if slice.context().cu_ctx() != self.driver().ctx.cu_ctx() {
            return Err(AdoptError::new(
                GraphError::ForeignObject { what: "buffer" },
                slice,
            ));
        }
        let len = slice.len();
        if len.checked_mul(std::mem::size_of::<T>()).is_none() {
            return Err(AdoptError::new(GraphError::size_overflow("cuda"), slice));
        }
        let stream = Arc::clone(slice.stream());
        let handle = match self.adopt_stream(Arc::clone(&stream)) {
            Ok(handle) => handle,
            Err(e) => return Err(AdoptError::new(e, slice)),
        };
        match self.is_capturing(&handle) {
            Ok(false) => {}
            Ok(true) => {
                return Err(AdoptError::new(
                    GraphError::Unsupported {
                        what: "adopting a CudaSlice whose stream is capturing (the adoption \
                               waits for the stream): adopt it before the capture"
                            .to_owned(),
                    },
                    slice,
                ));
            }
            Err(e) => return Err(AdoptError::new(e, slice)),
        }
        let mut slice = slice;
        // With tracking on, the slice's stream waits for its recorded reads and writes
        // elsewhere; the record this leaves is dropped with the slice's events below.
        drop(slice.device_ptr_mut(&stream));
        if let Err(e) = self.stream_synchronize(&handle) {
            return Err(AdoptError::new(e, slice));
        }
        if len == 0 {
            // No memory to take over (cudarc's empty slices may have no allocation): a buffer
            // of the backend's own, and the slice freed as cudarc frees it.
            return match self.alloc::<T>(0) {
                Ok(buffer) => Ok(buffer),
                Err(e) => Err(AdoptError::new(e, slice)),
            };
        }
        let ptr = slice.leak();
        // SAFETY: `ptr` is the live allocation of `len` elements cudarc made in this context
        // (checked above), now owned by nothing else (`leak`); its queued work finished (the
        // synchronization above); `free` synchronizes before freeing an adopted block.
        match unsafe { self.adopt_block::<T>(CuBlock::adopted(ptr), len) } {
            Ok(buffer) => Ok(buffer),
            Err(e) => {
                // SAFETY: the allocation `leak` gave up, with its length and stream: the slice
                // as it was (cudarc frees it again on drop).
                let slice = unsafe { stream.upgrade_device_ptr::<T>(ptr, len) };
                Err(AdoptError::new(e, slice))
            }
        }
    }

    /// Lends a buffer (or a view of one) to cudarc: the [`Lent`] is a kernel argument of
    /// cudarc's launch builder (`.arg(&lent)`) and an operand of its cuBLAS wrappers
    /// (`DevicePtr` / `DevicePtrMut`), and every use records, with the capture `stream` (or the
    /// cuBLAS wrapper's stream) takes part in, that the work uses the buffer's memory: the
    /// captured graph keeps it alive until it is reset, as for the backend's own ops — also
    /// when the stream was forked into the capture by the user's own event waits.
    ///
    /// `stream` is the stream the lent buffer's kernel launches go to (the launch builder's):
    /// the launch builder does not tell its stream to its arguments, so a launch on another
    /// stream would be tracked on the wrong one. Errors: a buffer of another backend instance
    /// or a stream of another context ([`GraphError::ForeignObject`]); a stream capturing into
    /// a capture the backend did not begin ([`GraphError::Unsupported`]: nothing would keep
    /// the memory alive for that graph). Uses that fail the same way later record
    /// `CUDA_ERROR_STREAM_CAPTURE_ISOLATION` (or `CUDA_ERROR_INVALID_CONTEXT`) in the
    /// context's error state, cudarc's way for calls that cannot return an error, and log it.
    ///
    /// The lent memory takes part in none of cudarc's event tracking: order it across streams
    /// as the backend's buffers are ordered (events, `record_stream`).
    pub fn lend<'a, T: Element>(
        &self,
        view: impl Into<View<'a, CudaBuffer<T>>>,
        stream: &'a Arc<CudaStream>,
    ) -> Result<Lent<'a, T>> {
        let view = view.into();
        let buffer = view.buffer();
        if buffer.instance_id() != self.instance_id() {
            return Err(GraphError::ForeignObject { what: "buffer" });
        }
        let lent = Lent {
            ptr: buffer.block().device_ptr() + view.byte_offset() as u64,
            len: view.len(),
            memory: buffer.as_ref(),
            stream,
            context: self.driver().ctx.cu_ctx(),
            element: PhantomData,
        };
        lent.track(stream)?;
        Ok(lent)
    }
}

/// A buffer of the backend (or a view of one) lent to cudarc by [`CudaBackend::lend`]: a
/// kernel argument of cudarc's launch builder and an operand of anything taking cudarc's
/// `DevicePtr` / `DevicePtrMut`, whose uses keep the memory alive for the graphs that capture
/// them. It borrows the buffer, so the buffer outlives the borrow; once the work is captured,
/// the graph keeps the memory even after the buffer is dropped.
pub struct Lent<'a, T> {
    ptr: sys::CUdeviceptr,
    len: usize,
    memory: &'a BufferMemory<CudaDevice>,
    stream: &'a Arc<CudaStream>,
    /// The backend's context: only its streams may use the memory.
    context: sys::CUcontext,
    element: PhantomData<&'a [T]>,
}

impl<T> Lent<'_, T> {
    /// The device address of the view's first element.
    pub fn device_address(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    /// Records that work on `stream` uses the memory (see [`CudaBackend::lend`]); true if the
    /// stream captures.
    fn track(&self, stream: &CudaStream) -> Result<bool> {
        if stream.context().cu_ctx() != self.context {
            return Err(GraphError::ForeignObject { what: "stream" });
        }
        // SAFETY: `stream` is a live stream of the backend's context (checked), borrowed for
        // this call, and the wrapper lives only within it (it never destroys the stream).
        let borrowed = unsafe { stream.context().wrap_borrowed_stream(stream.cu_stream()) };
        self.memory.track_raw_use(&CuStream::external(borrowed))
    }

    /// [`Lent::track`] at a use that cannot return an error: a failure is logged and left in
    /// the context's error state.
    fn track_at_use(&self, stream: &CudaStream) {
        if let Err(e) = self.track(stream) {
            let code = match e {
                GraphError::ForeignObject { .. } => sys::CUresult::CUDA_ERROR_INVALID_CONTEXT,
                _ => sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
            };
            tracing::error!(
                error = %e,
                "a lent buffer is used by work whose graph cannot keep its memory alive"
            );
            stream
                .context()
                .record_err::<()>(Err(cudarc::driver::DriverError(code)));
        }
    }
}

impl<T> fmt::Debug for Lent<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lent")
            .field("address", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .finish()
    }
}

impl<T> DeviceSlice<T> for Lent<'_, T> {
    fn len(&self) -> usize {
        self.len
    }

    /// The stream it was lent for.
    fn stream(&self) -> &Arc<CudaStream> {
        self.stream
    }
}

impl<T> DevicePtr<T> for Lent<'_, T> {
    fn device_ptr<'b>(&'b self, stream: &'b CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'b>) {
        self.track_at_use(stream);
        // No cudarc event: the backend orders its memory by its own rules.
        (self.ptr, SyncOnDrop::Record(None))
    }
}

impl<T> DevicePtrMut<T> for Lent<'_, T> {
    fn device_ptr_mut<'b>(
        &'b mut self,
        stream: &'b CudaStream,
    ) -> (sys::CUdeviceptr, SyncOnDrop<'b>) {
        self.track_at_use(stream);
        (self.ptr, SyncOnDrop::Record(None))
    }
}

// SAFETY: pushes the device pointer as cudarc pushes any `u64` argument — a pointer to the
// value, which lives as long as the borrow of the `Lent` (`'b`, at least the builder's `'a`).
unsafe impl<'a, 'b: 'a, 'c: 'b, T> PushKernelArg<&'b Lent<'c, T>> for LaunchArgs<'a> {
    #[inline(always)]
    fn arg(&mut self, arg: &'b Lent<'c, T>) -> &mut Self {
        // At the use, not only at the lend: a lend made before a capture began still has its
        // launch inside the capture kept alive.
        arg.track_at_use(arg.stream);
        <Self as PushKernelArg<&'b sys::CUdeviceptr>>::arg(self, &arg.ptr)
    }
}

/// Why [`CudaBackend::adopt_slice`] did not take a slice, with the slice, unchanged and still
/// the caller's. Converting it into a [`GraphError`] (`?`) drops the slice, which cudarc frees
/// as usual.
pub struct AdoptError<T> {
    /// Why.
    pub error: GraphError,
    /// The slice.
    pub slice: CudaSlice<T>,
}

impl<T> AdoptError<T> {
    fn new(error: GraphError, slice: CudaSlice<T>) -> Self {
        AdoptError { error, slice }
    }
}

impl<T> fmt::Debug for AdoptError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdoptError")
            .field("error", &self.error)
            .field("slice_len", &self.slice.len())
            .finish()
    }
}

impl<T> fmt::Display for AdoptError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "adopting a CudaSlice failed: {}", self.error)
    }
}

impl<T> std::error::Error for AdoptError<T> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl<T> From<AdoptError<T>> for GraphError {
    fn from(e: AdoptError<T>) -> GraphError {
        e.error
    }
}
