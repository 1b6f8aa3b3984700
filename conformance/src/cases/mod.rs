//! The suite: every case, in one declared list ([`suite`]), in the order it runs. The rules the
//! numbers refer to are written down in `docs/SEMANTICS.md`; the bodies live in one file per
//! rule (misuse and capture modes as tables of rows with one runner each).
//!
//! To add a case: write its body (`fn(&Target<B>) -> CaseResult`) in the file of its rule and
//! add one `Case` to the list, where its number belongs.

mod capture;
mod capture_modes;
mod debug;
mod differential;
mod editing;
mod gemm;
mod hardening;
mod hostile_sequences;
mod kernels;
mod lifecycle;
mod memory_safety;
mod misuse;
mod multi_stream;
mod ops;
mod panic_safety;
mod pools;
mod programmatic_launch;
mod state_machine;
mod stream_order;
mod torch_parity;
mod typed;
mod utilities;

use accel_graph_api::{
    Backend,
    CaptureErrorMode::{Default, Global, Relaxed, ThreadLocal},
};

use self::{
    capture_modes::{
        AnotherInstance, AnotherInstanceAndThread, AnotherThread, CaptureEnd, CaptureEndElsewhere,
        CapturingThread, EveryMode,
        Expect::{Allowed, Refused, StreamMismatch, WrongThread},
        IsCapturing, OtherThread, PlainAlloc, SameThread, SyncCapturingStream, Synchronize, row,
        rows,
    },
    misuse as m,
    utilities::{bucketed, full_graph, graphed_callables, shared_resources},
};
use crate::{
    Case,
    case::requirements::{
        capture_modes_enforced as modes, host_callbacks, multi_stream_capture as multi_stream,
        none, uncapturable_default_stream,
    },
};

const CAPTURE: &str = "5.01 capture";
const DIFFERENTIAL: &str = "5.02 differential";
const NO_KEEP: &str = "5.03 keep_graph=false";
const KEEP: &str = "5.04 keep_graph=true";
const MISUSE: &str = "5.05 misuse";
const MODES: &str = "5.06 capture modes";
const MULTI_STREAM: &str = "5.07 multi-stream";
const POOLS: &str = "5.08 pools";
const DEBUG: &str = "5.09 debug";
const PANIC: &str = "5.10 panic safety";
const EMPTY: &str = "5.11 empty capture";
const REPLAY_STREAM: &str = "5.12 replay stream";
const INTROSPECTION: &str = "5.13 introspection";
const STATE_MACHINE: &str = "5.14 state machine";
const GRAPHED: &str = "7 graphed callables";
const FULL_GRAPH: &str = "7 full-iteration wrapper";
const SHARED: &str = "7 shared resources";
const BUCKETED: &str = "7 bucketed cache";

/// Every case of the specification, in its declared order.
pub(crate) fn suite<B: Backend>() -> Vec<Case<B>> {
    Vec::from([
        // 5.01 capture records, does not execute.
        Case::new(
            "5.01 capture records, does not execute",
            CAPTURE,
            none,
            capture::records_not_executes,
        ),
        Case::new(
            "5.01b replay reads buffers as they are at replay time",
            CAPTURE,
            none,
            capture::reads_current_contents,
        ),
        Case::new(
            "5.01c host callback is captured and runs once per replay",
            CAPTURE,
            host_callbacks,
            capture::host_callback_per_replay,
        ),
        Case::new(
            "5.01d a host callback may switch its thread's current stream, eager and replayed",
            CAPTURE,
            host_callbacks,
            capture::host_callback_switches_streams,
        ),
        // 5.02 replay equals eager.
        Case::new(
            "5.02a replay equals eager, bit for bit, for random programs",
            DIFFERENTIAL,
            none,
            |t| differential::differential(t, false),
        ),
        Case::new(
            "5.02b replay equals eager for random fork/join programs over two streams",
            DIFFERENTIAL,
            multi_stream,
            |t| differential::differential(t, true),
        ),
        Case::new(
            "5.02c portable ops compute exactly what the host computes",
            DIFFERENTIAL,
            none,
            differential::eager_matches_host,
        ),
        Case::new(
            "5.02d each portable op, eager and replayed, equals its definition",
            DIFFERENTIAL,
            none,
            ops::each_op_matches_its_definition,
        ),
        // 5.03 / 5.04 keep_graph.
        Case::new(
            "5.03 keep_graph=false: ready at capture_end, instantiate and raw graph refused",
            NO_KEEP,
            none,
            lifecycle::no_keep_graph,
        ),
        Case::new(
            "5.03b keep_graph=false with debug mode keeps the raw graph, still no instantiate",
            NO_KEEP,
            none,
            lifecycle::no_keep_graph_debug_mode,
        ),
        Case::new(
            "5.04 keep_graph=true: captured at capture_end, first replay instantiates",
            KEEP,
            none,
            lifecycle::keep_graph_lazy_instantiate,
        ),
        Case::new(
            "5.04b keep_graph=true: explicit instantiate, repeatable",
            KEEP,
            none,
            lifecycle::keep_graph_explicit_instantiate,
        ),
        // 5.05 misuse: rows are (graph kind, state before the call, expected error).
        Case::new(
            "5.05a replay before capture: NotCaptured",
            MISUSE,
            none,
            m::row(
                m::Replay,
                &[
                    (m::Plain, m::Fresh, m::NotCaptured),
                    (m::Kept, m::Fresh, m::NotCaptured),
                ],
            ),
        ),
        Case::new(
            "5.05b pool() before capture: NotCaptured",
            MISUSE,
            none,
            m::row(
                m::Pool,
                &[
                    (m::Plain, m::Fresh, m::NotCaptured),
                    (m::UserPool, m::Fresh, m::NotCaptured),
                ],
            ),
        ),
        Case::new(
            "5.05c instantiate before capture: NotCaptured",
            MISUSE,
            none,
            m::row(
                m::Instantiate,
                &[
                    (m::Kept, m::Fresh, m::NotCaptured),
                    (m::Plain, m::Fresh, m::NotCaptured),
                ],
            ),
        ),
        Case::new(
            "5.05d capture_begin twice: AlreadyCapturing",
            MISUSE,
            none,
            m::row(
                m::CaptureBegin,
                &[(m::Plain, m::Capturing, m::AlreadyCapturing)],
            ),
        ),
        Case::new(
            "5.05e capture_begin on a captured graph: AlreadyCaptured",
            MISUSE,
            none,
            m::row(
                m::CaptureBegin,
                &[
                    (m::Plain, m::Captured, m::AlreadyCaptured),
                    (m::Kept, m::Captured, m::AlreadyCaptured),
                ],
            ),
        ),
        Case::new(
            "5.05f capture_end without capture_begin: NotCapturing",
            MISUSE,
            none,
            m::row(
                m::CaptureEnd,
                &[
                    (m::Plain, m::Fresh, m::NotCapturing),
                    (m::Plain, m::Captured, m::NotCapturing),
                ],
            ),
        ),
        Case::new(
            "5.05g capture on the default stream: StreamNotCapturable",
            MISUSE,
            uncapturable_default_stream,
            m::row(
                m::CaptureBeginOnDefaultStream,
                &[(m::Plain, m::Fresh, m::StreamNotCapturable)],
            ),
        ),
        Case::new(
            "5.05h debug_dump without debug mode or keep_graph: DebugModeNotEnabled",
            MISUSE,
            none,
            m::row(
                m::DebugDump,
                &[
                    (m::Plain, m::Fresh, m::DebugModeNotEnabled),
                    (m::Plain, m::Captured, m::DebugModeNotEnabled),
                ],
            ),
        ),
        Case::new(
            "5.05i debug_dump with debug mode before capture: NotCaptured",
            MISUSE,
            none,
            m::row(
                m::DebugDump,
                &[
                    (m::DebugMode, m::Fresh, m::NotCaptured),
                    (m::Kept, m::Fresh, m::NotCaptured),
                ],
            ),
        ),
        Case::new(
            "5.05j instantiate with keep_graph=false: InstantiateRequiresKeepGraph",
            MISUSE,
            none,
            m::row(
                m::Instantiate,
                &[(m::Plain, m::Captured, m::InstantiateRequiresKeepGraph)],
            ),
        ),
        Case::new(
            "5.05k raw graph (nodes) without keep_graph: RawGraphUnavailable",
            MISUSE,
            none,
            m::row(
                m::Nodes,
                &[
                    (m::Plain, m::Fresh, m::NotCaptured),
                    (m::Plain, m::Captured, m::RawGraphUnavailable),
                ],
            ),
        ),
        Case::new(
            "5.05l capture_end on another stream: CaptureStreamMismatch, capture goes on",
            MISUSE,
            none,
            m::row(
                m::CaptureEndOnOtherStream,
                &[(m::Plain, m::Capturing, m::CaptureStreamMismatch)],
            ),
        ),
        Case::new(
            "5.05m capture_begin on a stream another graph captures: error, nothing left capturing",
            MISUSE,
            none,
            m::begin_on_capturing_stream,
        ),
        Case::new(
            "5.05n invalid pool id: InvalidPoolId",
            MISUSE,
            none,
            m::invalid_pool_id,
        ),
        Case::new(
            "5.05o unknown capture error mode: UnknownCaptureErrorMode",
            MISUSE,
            none,
            m::unknown_capture_mode,
        ),
        Case::new(
            "5.05p element-wise ops on different lengths: LengthMismatch",
            MISUSE,
            none,
            m::length_mismatch,
        ),
        Case::new(
            "5.05q pool id issued by another instance: InvalidPoolId",
            MISUSE,
            none,
            m::foreign_pool_id,
        )
        .needing_another_instance(),
        Case::new(
            "5.05r buffer, stream or event of another instance: ForeignObject",
            MISUSE,
            none,
            m::foreign_objects,
        )
        .needing_another_instance(),
        // 5.06 capture modes: rows are (mode, where the call is made, call, outcome).
        Case::new(
            "5.06a global: unsafe call on the capturing thread errors and invalidates",
            MODES,
            modes,
            rows([row(
                Global,
                SameThread,
                PlainAlloc,
                Refused(CapturingThread),
            )]),
        ),
        Case::new(
            "5.06b thread_local: unsafe call on the capturing thread errors and invalidates",
            MODES,
            modes,
            rows([row(
                ThreadLocal,
                SameThread,
                PlainAlloc,
                Refused(CapturingThread),
            )]),
        ),
        Case::new(
            "5.06c relaxed: unsafe call on the capturing thread is allowed",
            MODES,
            modes,
            rows([row(Relaxed, SameThread, PlainAlloc, Allowed)]),
        ),
        Case::new(
            "5.06d default behaves as global on the capturing thread",
            MODES,
            modes,
            rows([row(
                Default,
                SameThread,
                PlainAlloc,
                Refused(CapturingThread),
            )]),
        ),
        Case::new(
            "5.06e global: unsafe call from another thread errors and invalidates",
            MODES,
            modes,
            rows([row(Global, AnotherThread, PlainAlloc, Refused(OtherThread))]),
        ),
        Case::new(
            "5.06f thread_local: unsafe call from another thread is allowed",
            MODES,
            modes,
            rows([row(ThreadLocal, AnotherThread, PlainAlloc, Allowed)]),
        ),
        Case::new(
            "5.06g relaxed: unsafe call from another thread is allowed",
            MODES,
            modes,
            rows([row(Relaxed, AnotherThread, PlainAlloc, Allowed)]),
        ),
        Case::new(
            "5.06h default behaves as global from another thread",
            MODES,
            modes,
            rows([row(
                Default,
                AnotherThread,
                PlainAlloc,
                Refused(OtherThread),
            )]),
        ),
        Case::new(
            "5.06i global: synchronize() on the capturing thread errors and invalidates",
            MODES,
            modes,
            rows([row(Global, SameThread, Synchronize, Refused(EveryMode))]),
        ),
        Case::new(
            "5.06j global: capture_end from another thread is WrongThread",
            MODES,
            modes,
            rows([row(Global, AnotherThread, CaptureEnd, WrongThread)]),
        ),
        Case::new(
            "5.06k thread_local: capture_end from another thread is WrongThread",
            MODES,
            modes,
            rows([row(ThreadLocal, AnotherThread, CaptureEnd, WrongThread)]),
        ),
        Case::new(
            "5.06l default: capture_end from another thread is WrongThread",
            MODES,
            modes,
            rows([row(Default, AnotherThread, CaptureEnd, WrongThread)]),
        ),
        Case::new(
            "5.06m relaxed: capture_end from another thread works",
            MODES,
            modes,
            rows([row(Relaxed, AnotherThread, CaptureEnd, Allowed)]),
        ),
        Case::new(
            "5.06n relaxed: stream_synchronize on the capturing stream still fails and invalidates",
            MODES,
            modes,
            rows([row(
                Relaxed,
                SameThread,
                SyncCapturingStream,
                Refused(EveryMode),
            )]),
        ),
        Case::new(
            "5.06p relaxed: device synchronize on the capturing thread fails and invalidates",
            MODES,
            modes,
            rows([row(Relaxed, SameThread, Synchronize, Refused(EveryMode))]),
        ),
        Case::new(
            "5.06q thread_local: device synchronize from another thread fails and invalidates",
            MODES,
            modes,
            rows([row(
                ThreadLocal,
                AnotherThread,
                Synchronize,
                Refused(EveryMode),
            )]),
        ),
        Case::new(
            "5.06o is_capturing is legal during a global capture, from any thread",
            MODES,
            modes,
            rows([
                row(Global, SameThread, IsCapturing, Allowed),
                row(Global, AnotherThread, IsCapturing, Allowed),
            ]),
        ),
        Case::new(
            "5.06r global: unsafe call through another instance errors and invalidates",
            MODES,
            modes,
            rows([row(
                Global,
                AnotherInstanceAndThread,
                PlainAlloc,
                Refused(OtherThread),
            )]),
        )
        .needing_another_instance(),
        Case::new(
            "5.06s thread_local: unsafe call through another instance on this thread errors",
            MODES,
            modes,
            rows([row(
                ThreadLocal,
                AnotherInstance,
                PlainAlloc,
                Refused(CapturingThread),
            )]),
        )
        .needing_another_instance(),
        Case::new(
            "5.06t every unsafe call, in every mode, on either thread follows CUDA's rules",
            MODES,
            modes,
            capture_modes::every_unsafe_call,
        ),
        Case::new(
            "5.06u capture_end from another thread with its own stream current: WrongThread \
             (relaxed: CaptureStreamMismatch), the capture goes on",
            MODES,
            modes,
            rows([
                row(Global, AnotherThread, CaptureEndElsewhere, WrongThread),
                row(ThreadLocal, AnotherThread, CaptureEndElsewhere, WrongThread),
                row(Default, AnotherThread, CaptureEndElsewhere, WrongThread),
                row(Relaxed, AnotherThread, CaptureEndElsewhere, StreamMismatch),
            ]),
        ),
        // 5.07 multi-stream capture.
        Case::new(
            "5.07a fork/join: work on a second stream joins the capture",
            MULTI_STREAM,
            multi_stream,
            multi_stream::fork_join,
        ),
        Case::new(
            "5.07b fork never joined back: CaptureUnjoined, nothing left capturing",
            MULTI_STREAM,
            multi_stream,
            multi_stream::unjoined_fork,
        ),
        // 5.08 pools.
        Case::new(
            "5.08a allocations inside a capture come from the graph's pool",
            POOLS,
            none,
            pools::capture_allocates_from_pool,
        ),
        Case::new(
            "5.08b a graph given pool=g1.pool() reuses g1's memory",
            POOLS,
            none,
            |t| pools::second_graph_reuses(t, false),
        ),
        Case::new(
            "5.08c graphs sharing a graph_pool_handle() pool reuse its memory",
            POOLS,
            none,
            |t| pools::second_graph_reuses(t, true),
        ),
        Case::new(
            "5.08d pool memory returns only when every graph and buffer let go",
            POOLS,
            none,
            pools::pool_released_last,
        ),
        Case::new(
            "5.08e graph_pool_handle() ids are unique; pool() reports the pool used",
            POOLS,
            none,
            pools::pool_ids,
        ),
        Case::new(
            "5.08f per-op allocations in a capture (129 allocations, 128 frees): replays equal \
             eager, the result keeps its address, memory flat",
            POOLS,
            none,
            pools::per_op_allocations,
        ),
        // 5.09 debug dumps.
        Case::new(
            "5.09a debug mode: debug_dump writes a DOT file naming each node",
            DEBUG,
            none,
            |t| debug::dump_names_each_node(t, false),
        ),
        Case::new(
            "5.09b keep_graph: debug_dump works without debug mode",
            DEBUG,
            none,
            |t| debug::dump_names_each_node(t, true),
        ),
        Case::new(
            "5.09c debug mode enabled after capture_end: RawGraphUnavailable",
            DEBUG,
            none,
            debug::debug_mode_too_late,
        ),
        // 5.10 panic safety.
        Case::new(
            "5.10a panic inside graph.capture(): stream not capturing, backend works, no leak",
            PANIC,
            none,
            panic_safety::panic_in_capture,
        ),
        Case::new(
            "5.10b panic inside backend.capture_on(): same, current stream restored",
            PANIC,
            none,
            panic_safety::panic_in_capture_on,
        ),
        Case::new(
            "5.10c error inside graph.capture(): capture discarded, error returned",
            PANIC,
            none,
            panic_safety::error_in_capture,
        ),
        Case::new(
            "5.10d panic or failed capture_end with a forked side stream: no stream left capturing",
            PANIC,
            multi_stream,
            panic_safety::forked_capture_discarded,
        ),
        // 5.11 - 5.13.
        Case::new(
            "5.11 empty capture is allowed, replay is a no-op, a warning is logged",
            EMPTY,
            none,
            capture::empty_capture,
        ),
        Case::new(
            "5.12 replay on another stream than the capture stream",
            REPLAY_STREAM,
            none,
            capture::replay_on_other_stream,
        ),
        Case::new(
            "5.13 k kernels + 1 copy give k Kernel nodes + 1 Memcpy node in a chain",
            INTROSPECTION,
            none,
            debug::kernels_and_copy_chain,
        ),
        // 5.14 the state machine, at random.
        Case::new(
            "5.14 random API sequences follow the graph state machine, never panic, leak nothing",
            STATE_MACHINE,
            none,
            state_machine::state_machine,
        ),
        // 7 seed utilities.
        Case::new(
            "7.01 graphed_callable_warmup_count",
            GRAPHED,
            none,
            graphed_callables::graphed_callable_warmup_count,
        ),
        Case::new(
            "7.02 graphed_callable_replay_matches_eager",
            GRAPHED,
            none,
            graphed_callables::graphed_callable_replay_matches_eager,
        ),
        Case::new(
            "7.03 graphed_callable_copies_only_foreign_inputs",
            GRAPHED,
            none,
            graphed_callables::graphed_callable_copies_only_foreign_inputs,
        ),
        Case::new(
            "7.04 graphed_callable_mode_fallback",
            GRAPHED,
            none,
            graphed_callables::graphed_callable_mode_fallback,
        ),
        Case::new(
            "7.05 graphed_callable_argument_errors",
            GRAPHED,
            none,
            graphed_callables::graphed_callable_argument_errors,
        ),
        Case::new(
            "7.06 graphed_callables_share_one_pool",
            GRAPHED,
            none,
            graphed_callables::graphed_callables_share_one_pool,
        ),
        Case::new(
            "7.07 full_graph_warmup_then_capture_once_per_stage",
            FULL_GRAPH,
            none,
            full_graph::full_graph_warmup_then_capture_once_per_stage,
        ),
        Case::new(
            "7.08 full_graph_replay_matches_eager_100_steps",
            FULL_GRAPH,
            none,
            full_graph::full_graph_replay_matches_eager_100_steps,
        ),
        Case::new(
            "7.09 full_graph_signature_recapture",
            FULL_GRAPH,
            none,
            full_graph::full_graph_signature_recapture,
        ),
        Case::new(
            "7.10 full_graph_signature_error",
            FULL_GRAPH,
            none,
            full_graph::full_graph_signature_error,
        ),
        Case::new(
            "7.11 full_graph_reset_one_stage",
            FULL_GRAPH,
            none,
            full_graph::full_graph_reset_one_stage,
        ),
        Case::new(
            "7.12 full_graph_single_mempool",
            FULL_GRAPH,
            none,
            full_graph::full_graph_single_mempool,
        ),
        Case::new(
            "7.13 static_buffer_loader_reuses_buffers",
            FULL_GRAPH,
            none,
            full_graph::static_buffer_loader_reuses_buffers,
        ),
        Case::new(
            "7.14 shared_singletons_per_instance",
            SHARED,
            none,
            shared_resources::shared_singletons_per_instance,
        ),
        Case::new(
            "7.15 bucketed_cache_pads_to_nearest_bucket",
            BUCKETED,
            none,
            bucketed::bucketed_cache_pads_to_nearest_bucket,
        ),
        Case::new(
            "7.16 bucketed_cache_eager_beyond_largest",
            BUCKETED,
            none,
            bucketed::bucketed_cache_eager_beyond_largest,
        ),
        Case::new(
            "7.17 bucketed_cache_replay_matches_eager",
            BUCKETED,
            none,
            bucketed::bucketed_cache_replay_matches_eager,
        ),
        Case::new(
            "7.18 bucketed_cache_argument_errors",
            BUCKETED,
            none,
            bucketed::bucketed_cache_argument_errors,
        ),
        Case::new(
            "7.19 shared_singletons_differ_between_instances",
            SHARED,
            none,
            shared_resources::shared_singletons_differ_between_instances,
        )
        .needing_another_instance(),
    ])
    .into_iter()
    // 5.15: hostile random sequences under a watchdog.
    .chain(hostile_sequences::cases())
    // 9: memory-safe replay.
    .chain(memory_safety::cases())
    // 10: hardening.
    .chain(hardening::cases())
    // 11: PyTorch parity.
    .chain(torch_parity::cases())
    // 12: stream order and capture membership.
    .chain(stream_order::cases())
    // 13: typed buffers and views.
    .chain(typed::cases())
    // 14: user kernels.
    .chain(kernels::cases())
    // 15: GEMM.
    .chain(gemm::cases())
    // 16: graph editing.
    .chain(editing::cases())
    .collect()
}
