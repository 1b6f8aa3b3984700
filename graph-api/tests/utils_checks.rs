//! The generic utility checks of the conformance suite, run on the mock backend. The checks
//! live in the conformance crate (so every backend runs them); they use only the public API,
//! so this test compiles them in directly.

#[path = "../../conformance/src/utilities.rs"]
mod utilities;

use accel_graph_mock::MockBackend;

macro_rules! check_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                let checks = utilities::utility_checks::<MockBackend>();
                let (_, check) = checks
                    .iter()
                    .find(|(n, _)| *n == stringify!($name))
                    .expect("the check exists");
                let backend = MockBackend::new();
                if let Err(message) = check(&backend) {
                    panic!("{}: {message}", stringify!($name));
                }
                assert!(!backend.any_capture_active(), "a capture was left open");
            }
        )*

        /// Every check of the list has a test here (a new check must be added above).
        #[test]
        fn every_check_is_run() {
            let run = [$(stringify!($name)),*];
            for (name, _) in utilities::utility_checks::<MockBackend>() {
                assert!(run.contains(&name), "check {name} has no test");
            }
        }
    };
}

check_tests!(
    graphed_callable_warmup_count,
    graphed_callable_replay_matches_eager,
    graphed_callable_copies_only_foreign_inputs,
    graphed_callable_mode_fallback,
    graphed_callable_argument_errors,
    graphed_callables_share_one_pool,
    full_graph_warmup_then_capture_once_per_stage,
    full_graph_replay_matches_eager_100_steps,
    full_graph_signature_recapture,
    full_graph_signature_error,
    full_graph_reset_one_stage,
    full_graph_single_mempool,
    static_buffer_loader_reuses_buffers,
    shared_singletons_per_instance,
    bucketed_cache_pads_to_nearest_bucket,
    bucketed_cache_eager_beyond_largest,
    bucketed_cache_replay_matches_eager,
    bucketed_cache_argument_errors,
);
