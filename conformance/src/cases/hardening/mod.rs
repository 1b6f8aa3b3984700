//! §10: hardening. Each case proves one item of the hardening work: an input or misuse that
//! used to be accepted, to give a wrong result silently or to panic is now refused with its
//! typed error, and leaves the backend (and the capture in progress, if any) usable.
//!
//! `docs/SEMANTICS.md` (section 10) states each rule; `docs/RELIABILITY.md` ("Refused inputs
//! and misuse") lists the inputs and the errors they give.

mod host_panics;
mod identity;
mod instances;
mod loader;
mod pool_ids;
mod scoped;
mod sizes;
mod surfaces;

use accel_graph_api::Backend;

use crate::{
    Case,
    case::requirements::{
        capture_modes_enforced, conditional_nodes, host_callbacks, multi_stream_capture, none,
    },
};

const HARDENING: &str = "10 hardening";

/// The hardening cases, in the order of the items they prove.
pub(crate) fn cases<B: Backend>() -> Vec<Case<B>> {
    Vec::from([
        Case::new(
            "10.01 alloc of an overflowing size: OutOfMemory, inside and outside a capture",
            HARDENING,
            none,
            sizes::overflowing_sizes,
        ),
        Case::new(
            "10.02 graphed call: another instance's buffer at the static address: ForeignObject",
            HARDENING,
            none,
            identity::graphed_callable,
        )
        .needing_another_instance(),
        Case::new(
            "10.03 loader: another instance's buffer at the static address: ForeignObject",
            HARDENING,
            none,
            identity::static_buffer_loader,
        )
        .needing_another_instance(),
        Case::new(
            "10.04 bucketed cache: another instance's buffer at the static address: ForeignObject",
            HARDENING,
            none,
            identity::bucketed_cache,
        )
        .needing_another_instance(),
        Case::new(
            "10.05 pool (0, 0) through the public field: a private pool of the graph's own",
            HARDENING,
            none,
            pool_ids::none_through_the_field,
        ),
        Case::new(
            "10.06 forged pool ids (the next id, an id of the other kind): InvalidPoolId",
            HARDENING,
            none,
            pool_ids::forged_ids,
        ),
        Case::new(
            "10.07 scoped capture whose body switches stream and fails: the body's error",
            HARDENING,
            none,
            scoped::body_switches_stream,
        ),
        Case::new(
            "10.08 static buffer loader: a failed first load registers nothing",
            HARDENING,
            none,
            loader::failed_first_load,
        )
        .needing_another_instance(),
        Case::new(
            "10.09 unsafe calls through another instance follow CUDA's rules, every mode",
            HARDENING,
            capture_modes_enforced,
            instances::unsafe_calls_through_another_instance,
        )
        .needing_another_instance(),
        Case::new(
            "10.10 another instance's stream: ForeignObject, its capture undisturbed",
            HARDENING,
            none,
            instances::foreign_capture_stream,
        )
        .needing_another_instance(),
        Case::new(
            "10.11 captured host callback panics: one HostCallbackPanicked naming the node",
            HARDENING,
            host_callbacks,
            host_panics::captured,
        ),
        Case::new(
            "10.12 eager host callback panics: one HostCallbackPanicked, the stream works",
            HARDENING,
            host_callbacks,
            host_panics::eager,
        ),
        Case::new(
            "10.13 a capture whose forks failed twice still ends: CaptureInvalidated, no hang",
            HARDENING,
            multi_stream_capture,
            surfaces::failed_forks_leave_the_end_free,
        ),
        Case::new(
            "10.14 kernel arguments are checked against the memory they name: a misstated \
             length, offset or element type, another instance's buffer",
            HARDENING,
            none,
            surfaces::misstated_buffers_are_checked,
        ),
        Case::new(
            "10.15 op operands overlapping in part: OverlappingOperands; in place and disjoint \
             views work",
            HARDENING,
            none,
            surfaces::overlapping_operands,
        ),
        Case::new(
            "10.16 GEMM whose C overlaps A or B: OverlappingOperands, C unchanged",
            HARDENING,
            none,
            surfaces::gemm_output_aliasing,
        ),
        Case::new(
            "10.17 one buffer bound to two written kernel parameters: KernelArguments",
            HARDENING,
            none,
            surfaces::aliasing_kernel_writes,
        ),
        Case::new(
            "10.18 capture_end inside a conditional body: refused, the capture invalidated",
            HARDENING,
            conditional_nodes,
            surfaces::capture_end_inside_a_body,
        ),
        Case::new(
            "10.19 a wait in a conditional body on an event recorded outside it: Unsupported, \
             the capture goes on",
            HARDENING,
            conditional_nodes,
            surfaces::wait_in_a_body_on_an_outside_event,
        ),
        Case::new(
            "10.20 external events dropped after a capture recorded and waited on them: the \
             graph keeps them, replays run",
            HARDENING,
            none,
            surfaces::external_events_live_with_their_graph,
        ),
        Case::new(
            "10.21 a wait outside a conditional body on an event recorded in it: Unsupported, \
             the capture goes on",
            HARDENING,
            conditional_nodes,
            surfaces::wait_outside_a_body_on_an_event_recorded_in_it,
        ),
    ])
}
