//! Host callbacks in stream order: the trampolines the driver calls, and the panics they catch.
//!
//! A callback runs on whatever thread the device runtime uses (a driver thread on CUDA and
//! HIP, the caller's on the mock), so a panic in it cannot unwind into the runtime and cannot
//! be returned by the call that issued it. It is caught, kept in [`HostPanics`], and reported
//! as [`GraphError::HostCallbackPanicked`] by the next call that observes the device: the
//! replay that ran it (synchronous backends), or a later replay or synchronize.
//!
//! A callback may drop buffers, but CUDA and HIP forbid any runtime call inside a host
//! function, a device free included: while a callback runs, the thread is marked
//! ([`in_host_callback`]) and device frees are deferred to the next backend call made outside
//! a callback (see `Domain::free`).

use std::{
    cell::Cell,
    ffi::c_void,
    panic::{self, AssertUnwindSafe},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use accel_graph_api::{GraphError, HostCallback, Result};

thread_local! {
    /// Set while a host callback runs on this thread.
    static IN_HOST_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

/// True while a host callback runs on the calling thread: no device runtime call may be made.
pub(crate) fn in_host_callback() -> bool {
    IN_HOST_CALLBACK.with(Cell::get)
}

/// Marks the thread for as long as it lives (restoring the previous mark: callbacks may nest
/// on synchronous backends).
struct CallbackMark(bool);

impl CallbackMark {
    fn set() -> Self {
        CallbackMark(IN_HOST_CALLBACK.with(|m| m.replace(true)))
    }
}

impl Drop for CallbackMark {
    fn drop(&mut self) {
        IN_HOST_CALLBACK.with(|m| m.set(self.0));
    }
}

/// Panics caught in host callbacks of one backend instance, not reported yet.
#[derive(Default)]
pub(crate) struct HostPanics {
    /// Fast path: checked after every replay.
    any: AtomicBool,
    caught: Mutex<Vec<(String, String)>>,
}

impl HostPanics {
    fn record(&self, callback: &str, message: String) {
        tracing::error!(
            callback,
            message,
            "a host callback panicked; the panic was caught"
        );
        self.caught
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((callback.to_owned(), message));
        self.any.store(true, Ordering::Release);
    }

    /// `Err(HostCallbackPanicked)` for the first panic not reported yet (all are cleared).
    #[inline]
    pub(crate) fn check(&self) -> Result<()> {
        if !self.any.load(Ordering::Acquire) {
            return Ok(());
        }
        let caught = std::mem::take(&mut *self.caught.lock().unwrap_or_else(|e| e.into_inner()));
        self.any.store(false, Ordering::Release);
        match caught.into_iter().next() {
            Some((callback, message)) => {
                Err(GraphError::HostCallbackPanicked { callback, message })
            }
            None => Ok(()),
        }
    }
}

/// A callback with what it needs to report a panic.
pub(crate) struct HostCall {
    f: HostCallback,
    label: String,
    panics: Arc<HostPanics>,
}

impl HostCall {
    pub(crate) fn new(f: HostCallback, label: String, panics: Arc<HostPanics>) -> Box<Self> {
        Box::new(HostCall { f, label, panics })
    }

    fn call(&self) {
        let _mark = CallbackMark::set();
        if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| (self.f)())) {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic without a message".to_owned());
            self.panics.record(&self.label, message);
        }
    }
}

/// Host function of an eager callback: runs it once and frees it.
///
/// # Safety
/// `data` is a `Box<HostCall>` leaked for this one call.
pub(crate) unsafe extern "C" fn run_once(data: *mut c_void) {
    // SAFETY: per the contract, `data` came from `Box::into_raw` and is run exactly once.
    let call = unsafe { Box::from_raw(data.cast::<HostCall>()) };
    call.call();
}

/// Host function of a captured callback: runs it; the graph owns it and frees it once no
/// launch can call it any more.
///
/// # Safety
/// `data` points to a `HostCall` kept alive by the graph that launches it.
pub(crate) unsafe extern "C" fn run_kept(data: *mut c_void) {
    // SAFETY: per the contract, the graph keeps the `HostCall` alive while it can launch.
    let call = unsafe { &*data.cast::<HostCall>() };
    call.call();
}
