//! Host callbacks in stream order (hipLaunchHostFunc): captured ones become host nodes that
//! run on every replay, so their closure lives as long as the graph.

use std::{
    ffi::c_void,
    panic::{AssertUnwindSafe, catch_unwind},
};

use accel_graph_api::HostCallback;

fn call(f: &HostCallback) {
    // A panic must not unwind into the runtime's thread.
    if catch_unwind(AssertUnwindSafe(|| f())).is_err() {
        tracing::error!("a host callback panicked; the panic was stopped at the HIP boundary");
    }
}

/// Trampoline for a callback run once (eagerly): takes back the box and drops it.
pub(crate) unsafe extern "C" fn run_once(user: *mut c_void) {
    // SAFETY: `user` is `Box::into_raw(Box<HostCallback>)`, handed to exactly one eager launch.
    let f = unsafe { Box::from_raw(user.cast::<HostCallback>()) };
    call(&f);
}

/// Trampoline for a captured callback: borrows the box its graph keeps alive.
pub(crate) unsafe extern "C" fn run_captured(user: *mut c_void) {
    // SAFETY: `user` points at a `Box<HostCallback>` owned by the graph's keep-alive list,
    // which outlives every launch of the graph.
    let f = unsafe { &*user.cast::<HostCallback>() };
    call(f);
}
