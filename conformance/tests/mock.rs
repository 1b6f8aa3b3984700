//! The whole conformance suite on the mock backend, one libtest test per case. Every instance
//! the suite opens is on one simulated device (as CUDA instances of one GPU are), so the cases
//! about several instances of a device run too.
//!
//! The stream-order program (12.01) runs on fewer elements than on a device unless the
//! environment asks for a number: its size makes a GPU run the graph's branches concurrently,
//! while the mock runs them one after the other whatever the size (the blocks' addresses are
//! what it checks there), and a million elements take half a minute in a debug build.

use std::sync::Once;

use accel_graph_mock::{MockBackend, MockConfig};

/// Elements of the stream-order program when `ACCEL_GRAPH_CONFORMANCE_STREAM_ORDER_ELEMENTS`
/// is unset.
const MOCK_STREAM_ORDER_ELEMENTS: &str = "65536";

/// The factory runs once per instance a case needs; the default is lowered on its first call.
static LOWER_DEFAULTS: Once = Once::new();

fn lower_defaults() {
    let name = accel_graph_conformance::STREAM_ORDER_ELEMENTS_ENV;
    if std::env::var_os(name).is_none() {
        // SAFETY: runs on the factory's first call, which the harness makes on the main thread
        // before any case runs, so no other thread can read the environment concurrently.
        unsafe { std::env::set_var(name, MOCK_STREAM_ORDER_ELEMENTS) };
    }
}

accel_graph_conformance::conformance_main!({
    LOWER_DEFAULTS.call_once(lower_defaults);
    MockBackend::with_config(MockConfig::shared(0))
});
