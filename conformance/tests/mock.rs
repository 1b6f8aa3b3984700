//! The whole conformance suite on the mock backend, one libtest test per case. Every instance
//! the suite opens is on one simulated device (as CUDA instances of one GPU are), so the cases
//! about several instances of a device run too.

use accel_graph_mock::{MockBackend, MockConfig};

accel_graph_conformance::conformance_main!(MockBackend::with_config(MockConfig::shared(0)));
