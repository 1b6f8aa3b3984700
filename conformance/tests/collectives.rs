//! The collective cases (§17) on the mock, with worlds of 1, 2 and 4 simulated ranks: each
//! rank a mock instance of its own (a device of its own, as GPUs are) on a thread of its own.

use accel_graph_mock::MockBackend;

accel_graph_conformance::collectives_main!(|_rank| Ok(MockBackend::new()), [1, 2, 4]);
