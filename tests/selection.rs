//! Run-time backend selection through the facade.

use accel_graph::{Backend, BackendChoice, BackendJob, BackendKind, GraphError};

struct KindOf;
impl BackendJob for KindOf {
    type Output = BackendKind;
    fn run<B: Backend>(self, backend: &B) -> BackendKind {
        backend.kind()
    }
}

#[test]
fn choice_parses_names_and_auto() {
    assert_eq!(
        "auto".parse::<BackendChoice>().unwrap(),
        BackendChoice::Auto
    );
    assert_eq!(
        "CUDA".parse::<BackendChoice>().unwrap(),
        BackendChoice::Only(BackendKind::Cuda)
    );
    let err = "tpu".parse::<BackendChoice>().unwrap_err();
    assert!(
        matches!(err, GraphError::UnknownBackend(ref name) if name == "tpu"),
        "{err}"
    );
    assert!(err.to_string().contains("unknown backend 'tpu'"), "{err}");
}

#[test]
fn only_mock_runs_on_the_mock() {
    let kind = accel_graph::run_on(BackendChoice::Only(BackendKind::Mock), KindOf).unwrap();
    assert_eq!(kind, BackendKind::Mock);
}

#[test]
fn auto_falls_back_to_a_backend_that_works() {
    // The mock always works, so Auto always finds something; which one depends on the machine.
    let kind = accel_graph::run_on(BackendChoice::Auto, KindOf).unwrap();
    assert!(accel_graph::compiled_backends().contains(&kind));
}

#[test]
fn a_backend_not_compiled_in_is_unavailable_with_the_feature_named() {
    for kind in BackendKind::ALL {
        if accel_graph::compiled_backends().contains(&kind) {
            continue;
        }
        match accel_graph::run_on(BackendChoice::Only(kind), KindOf) {
            Err(GraphError::BackendUnavailable { reason, .. }) => {
                assert!(reason.contains(kind.name()), "{reason}")
            }
            other => panic!("{kind}: expected BackendUnavailable, got {other:?}"),
        }
    }
}

#[test]
fn any_graph_holds_and_drives_a_mock_graph() {
    use accel_graph::prelude::*;
    let backend = accel_graph::mock::MockBackend::new();
    let x = backend.alloc_from(&[0.0; 4]).unwrap();
    let stream = backend.new_stream().unwrap();
    let _current = backend.use_stream(&stream).unwrap();
    let mut graph: AnyGraph = backend
        .graph(GraphOptions::new().keep_graph(true))
        .unwrap()
        .into();
    graph.capture(|| backend.add_scalar(&x, 1.0)).unwrap();
    assert_eq!(graph.state(), GraphState::Captured);
    graph.replay().unwrap();
    assert_eq!(graph.state(), GraphState::Ready);
    assert_eq!(backend.download(&x).unwrap(), vec![1.0; 4]);
    assert!(matches!(
        graph.capture_begin(),
        Err(GraphError::AlreadyCaptured)
    ));
    graph.reset();
    assert_eq!(graph.state(), GraphState::Empty);
}

#[test]
fn a_backend_variable_that_is_not_unicode_is_an_error_naming_it() {
    use std::os::unix::ffi::OsStrExt;
    // The variable is read by this test only (no other test of this binary reads it).
    let value = std::ffi::OsStr::from_bytes(b"cu\xffda");
    // SAFETY: this test binary's other tests do not read or write the environment.
    unsafe { std::env::set_var(accel_graph::BACKEND_ENV, value) };
    let result = BackendChoice::from_env(BackendChoice::Auto);
    // SAFETY: as above.
    unsafe { std::env::remove_var(accel_graph::BACKEND_ENV) };
    match result {
        Err(GraphError::InvalidEnvironment { name, .. }) => {
            assert_eq!(name, accel_graph::BACKEND_ENV)
        }
        other => panic!("expected InvalidEnvironment, got {other:?}"),
    }
}
