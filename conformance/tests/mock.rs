//! The whole conformance suite on the mock backend, one libtest test per case.

accel_graph_conformance::conformance_main!(Ok::<_, accel_graph_api::GraphError>(
    accel_graph_mock::MockBackend::new()
));
