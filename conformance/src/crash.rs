//! A backtrace when the process dies of a fault, for the suite's crash diagnosis on machines
//! without a debugger (the GPU machine has none): set [`CRASH_BACKTRACE_ENV`] and a
//! segmentation fault, bus error or abort prints the faulting thread, the fault address and
//! that thread's stack before the process dies of the signal as it would have.
//!
//! Best effort by nature: the handler formats and allocates, which a fault inside the
//! allocator can deadlock; that is why it is opt-in and never on in CI.

/// Set (to anything) to print a backtrace when the process dies of a fault.
pub const CRASH_BACKTRACE_ENV: &str = "ACCEL_GRAPH_CRASH_BACKTRACE";

/// Installs the handler if [`CRASH_BACKTRACE_ENV`] is set (Unix only; elsewhere nothing).
pub(crate) fn install_if_asked() {
    if std::env::var_os(CRASH_BACKTRACE_ENV).is_some() {
        imp::install();
    }
}

#[cfg(unix)]
mod imp {
    use std::ffi::{c_int, c_void};

    extern "C" fn on_fault(signal: c_int, info: *mut libc::siginfo_t, _context: *mut c_void) {
        // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
        let address = unsafe { (*info).si_addr() };
        let thread = std::thread::current();
        eprintln!(
            "accel-graph conformance: signal {signal} at address {address:p} in thread {:?}\n{}",
            thread.name().unwrap_or("<unnamed>"),
            std::backtrace::Backtrace::force_capture()
        );
        // Dies of the signal as it would have: the default action, raised again.
        // SAFETY: resetting a signal's disposition and raising it are async-signal-safe.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
        }
    }

    pub(super) fn install() {
        for signal in [libc::SIGSEGV, libc::SIGBUS, libc::SIGABRT] {
            // SAFETY: a zeroed sigaction is a valid value (no flags, empty mask) that is then
            // filled in; the handler has the SA_SIGINFO signature. It runs on the faulting
            // thread's own stack, not the small alternate one the standard library keeps for
            // stack overflows: symbolising a backtrace needs far more than that holds (a
            // stack overflow then dies as it would have, without a backtrace).
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_fault as *const () as usize;
                action.sa_flags = libc::SA_SIGINFO;
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(signal, &action, std::ptr::null_mut());
            }
        }
    }
}

#[cfg(not(unix))]
mod imp {
    pub(super) fn install() {}
}
