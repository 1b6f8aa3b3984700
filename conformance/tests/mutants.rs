//! The suite has teeth: the mock with one deliberate flaw must fail the cases that pin that
//! behaviour down (and a faithful delegate must pass them).

use std::sync::{Arc, Mutex};

use accel_graph_api::{
    Backend, BackendKind, BlockInfo, Capabilities, CapturedNode, ConditionElement, Element,
    EventOptions, FloatElement, Gemm, GraphError, GraphOptions, HostCallback, InstanceCache,
    MemoryStats, PoolId, PortableOp, PortableOps, Result, View,
    kernel::{Kernel, KernelArg},
};
use accel_graph_conformance::{Outcome, Target, cases, run_case};
use accel_graph_mock::{MockBackend, MockBuffer, MockConfig};

/// One way of getting the semantics wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flaw {
    /// None: a faithful delegate.
    Faithful,
    /// `add_scalar` adds a little too much (eager and captured alike).
    AddScalarOff,
    /// `scale` is dropped while the current stream captures (so replay != eager).
    ScaleNotCaptured,
    /// `is_capturing` always says no.
    NeverCapturing,
    /// Every graph leaks a buffer.
    GraphLeaksBuffer,
}

/// The mock with `flaw`.
#[derive(Debug, Clone)]
struct Mutant {
    inner: MockBackend,
    flaw: Flaw,
    leaked: Arc<Mutex<Vec<MockBuffer>>>,
}

impl Mutant {
    fn new(flaw: Flaw) -> Self {
        Mutant {
            inner: MockBackend::new(),
            flaw,
            leaked: Arc::default(),
        }
    }
}

impl PortableOps for Mutant {
    type Memory = <MockBackend as PortableOps>::Memory;
    type Buffer<T: Element> = MockBuffer<T>;

    fn launch(&self, op: PortableOp<View<'_, MockBuffer>>) -> Result<()> {
        match (self.flaw, op) {
            (Flaw::AddScalarOff, PortableOp::AddScalar { x, c }) => {
                self.inner.add_scalar(x, c + 1.0 / 1024.0)
            }
            (Flaw::ScaleNotCaptured, PortableOp::Scale { .. })
                if self.inner.is_capturing(&self.inner.current_stream())? =>
            {
                Ok(())
            }
            _ => self.inner.launch(op),
        }
    }
}

impl Backend for Mutant {
    type Stream = <MockBackend as Backend>::Stream;
    type Event = <MockBackend as Backend>::Event;
    type Graph = <MockBackend as Backend>::Graph;

    fn kind(&self) -> BackendKind {
        self.inner.kind()
    }
    fn instance_id(&self) -> u64 {
        self.inner.instance_id()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn instance_cache(&self) -> &InstanceCache {
        self.inner.instance_cache()
    }
    fn default_stream(&self) -> Self::Stream {
        self.inner.default_stream()
    }
    fn new_stream(&self) -> Result<Self::Stream> {
        self.inner.new_stream()
    }
    fn current_stream(&self) -> Self::Stream {
        self.inner.current_stream()
    }
    fn set_current_stream(&self, stream: &Self::Stream) -> Result<Self::Stream> {
        self.inner.set_current_stream(stream)
    }
    fn synchronize(&self) -> Result<()> {
        self.inner.synchronize()
    }
    fn stream_synchronize(&self, stream: &Self::Stream) -> Result<()> {
        self.inner.stream_synchronize(stream)
    }
    fn is_capturing(&self, stream: &Self::Stream) -> Result<bool> {
        match self.flaw {
            Flaw::NeverCapturing => Ok(false),
            _ => self.inner.is_capturing(stream),
        }
    }
    fn new_event_with(&self, options: EventOptions) -> Result<Self::Event> {
        self.inner.new_event_with(options)
    }
    fn record_event(&self, event: &Self::Event) -> Result<()> {
        self.inner.record_event(event)
    }
    fn wait_event(&self, event: &Self::Event) -> Result<()> {
        self.inner.wait_event(event)
    }
    fn event_synchronize(&self, event: &Self::Event) -> Result<()> {
        self.inner.event_synchronize(event)
    }
    fn event_query(&self, event: &Self::Event) -> Result<bool> {
        self.inner.event_query(event)
    }
    fn elapsed_time(&self, start: &Self::Event, end: &Self::Event) -> Result<f32> {
        self.inner.elapsed_time(start, end)
    }
    fn alloc<T: Element>(&self, len: usize) -> Result<Self::Buffer<T>> {
        self.inner.alloc(len)
    }
    fn upload<'a, T: Element>(
        &self,
        dst: impl Into<View<'a, Self::Buffer<T>>>,
        src: &[T],
    ) -> Result<()> {
        self.inner.upload(dst, src)
    }
    fn download_into<'a, T: Element>(
        &self,
        src: impl Into<View<'a, Self::Buffer<T>>>,
        dst: &mut [T],
    ) -> Result<()> {
        self.inner.download_into(src, dst)
    }
    fn launch_kernel(
        &self,
        kernel: &Kernel,
        grid: [u32; 3],
        args: &[KernelArg<'_, Self::Memory>],
    ) -> Result<()> {
        self.inner.launch_kernel(kernel, grid, args)
    }
    fn prepare_kernel(&self, kernel: &Kernel) -> Result<()> {
        self.inner.prepare_kernel(kernel)
    }
    fn gemm<'a, 'b, 'c, T: FloatElement>(
        &self,
        spec: &Gemm,
        a: impl Into<View<'a, Self::Buffer<T>>>,
        b: impl Into<View<'b, Self::Buffer<T>>>,
        c: impl Into<View<'c, Self::Buffer<T>>>,
    ) -> Result<()> {
        self.inner.gemm(spec, a, b, c)
    }
    fn record_stream<T: Element>(
        &self,
        buffer: &Self::Buffer<T>,
        stream: &Self::Stream,
    ) -> Result<()> {
        self.inner.record_stream(buffer, stream)
    }
    fn memory_stats(&self) -> MemoryStats {
        self.inner.memory_stats()
    }
    fn memory_snapshot(&self) -> Vec<BlockInfo> {
        self.inner.memory_snapshot()
    }
    fn empty_cache(&self) -> Result<()> {
        self.inner.empty_cache()
    }
    fn host_callback(&self, f: HostCallback) -> Result<()> {
        self.inner.host_callback(f)
    }
    fn graph(&self, options: GraphOptions) -> Result<Self::Graph> {
        if self.flaw == Flaw::GraphLeaksBuffer {
            let buffer = self.inner.alloc(16)?;
            self.leaked
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(buffer);
        }
        self.inner.graph(options)
    }
    fn graph_pool_handle(&self) -> PoolId {
        self.inner.graph_pool_handle()
    }
    fn captured_node(&self) -> Result<CapturedNode> {
        self.inner.captured_node()
    }
    fn update_graph(&self, graph: &mut Self::Graph, from: &Self::Graph) -> Result<()> {
        self.inner.update_graph(graph, from)
    }
    fn update_node(
        &self,
        graph: &mut Self::Graph,
        node: CapturedNode,
        args: &[(usize, KernelArg<'_, Self::Memory>)],
    ) -> Result<()> {
        self.inner.update_node(graph, node, args)
    }
    fn if_then<'a, T: ConditionElement>(
        &self,
        cond: impl Into<View<'a, Self::Buffer<T>>>,
        then: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        self.inner.if_then(cond, then)
    }
    fn if_else<'a, T: ConditionElement>(
        &self,
        cond: impl Into<View<'a, Self::Buffer<T>>>,
        then: impl FnOnce() -> Result<()>,
        otherwise: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        self.inner.if_else(cond, then, otherwise)
    }
    fn while_loop<'a, T: ConditionElement>(
        &self,
        cond: impl Into<View<'a, Self::Buffer<T>>>,
        body: impl FnMut() -> Result<()>,
    ) -> Result<()> {
        self.inner.while_loop(cond, body)
    }
}

/// The case whose name starts with `prefix`.
fn case<B: Backend>(prefix: &str) -> accel_graph_conformance::Case<B> {
    cases::<B>()
        .into_iter()
        .find(|c| c.name.starts_with(prefix))
        .unwrap_or_else(|| panic!("no case {prefix}"))
}

/// The outcome of the case whose name starts with `prefix` on a mock with `flaw`.
fn outcome(flaw: Flaw, prefix: &str) -> Outcome {
    let target = Target::open(move || Ok(Mutant::new(flaw))).expect("the mutant opens");
    run_case(&target, &case(prefix)).outcome
}

fn assert_fails(flaw: Flaw, prefix: &str) {
    match outcome(flaw, prefix) {
        Outcome::Failed(message) => println!("{flaw:?} fails {prefix}: {message}"),
        other => panic!("{flaw:?} should fail case {prefix}, got {other:?}"),
    }
}

#[test]
fn faithful_delegate_passes() {
    for prefix in ["5.01 ", "5.02c", "5.08a", "5.13 "] {
        assert_eq!(outcome(Flaw::Faithful, prefix), Outcome::Passed, "{prefix}");
    }
}

#[test]
fn wrong_arithmetic_is_caught() {
    assert_fails(Flaw::AddScalarOff, "5.01 ");
    assert_fails(Flaw::AddScalarOff, "5.02c");
}

#[test]
fn replay_differing_from_eager_is_caught() {
    assert_fails(Flaw::ScaleNotCaptured, "5.02a");
    assert_fails(Flaw::ScaleNotCaptured, "5.13 ");
}

#[test]
fn lying_is_capturing_is_caught() {
    assert_fails(Flaw::NeverCapturing, "5.01 ");
    assert_fails(Flaw::NeverCapturing, "5.05l");
    assert_fails(Flaw::NeverCapturing, "5.14");
}

#[test]
fn leaks_are_caught() {
    assert_fails(Flaw::GraphLeaksBuffer, "5.01 ");
    assert_fails(Flaw::GraphLeaksBuffer, "5.08a");
}

/// The mock claiming no host callbacks: the host-callback case is skipped with the reason.
#[test]
fn missing_capability_is_a_skip_with_reason() {
    let backend = Mutant::new(Flaw::Faithful);
    let mut caps = backend.capabilities();
    caps.host_callbacks = false;
    assert_eq!(
        case::<Mutant>("5.01c").skip_reason(&caps).as_deref(),
        Some("backend has no host callbacks")
    );
}

/// An unavailable backend: every trial is ignored, none passes, none fails.
#[test]
fn unavailable_backend_ignores_every_case() {
    use accel_graph_conformance::libtest_mimic::{Arguments, run};
    let trials = accel_graph_conformance::trials(|| {
        Err::<Mutant, _>(GraphError::BackendUnavailable {
            backend: "mock",
            reason: "switched off for this test".into(),
        })
    });
    let count = trials.len() as u64;
    assert_eq!(count as usize, cases::<Mutant>().len());
    // The nested run logs to a file, so its summary line does not mix with this test's.
    let log = tempfile::NamedTempFile::new().expect("temporary log file");
    let args = Arguments {
        test_threads: Some(1),
        logfile: Some(log.path().to_string_lossy().into_owned()),
        ..Arguments::default()
    };
    let conclusion = run(&args, trials);
    assert_eq!(
        (
            conclusion.num_passed,
            conclusion.num_failed,
            conclusion.num_ignored
        ),
        (0, 0, count)
    );
}

/// Cases about several instances of a device are skipped, with the reason, on a target of one
/// instance (what `run_report(&backend)` runs on), and run on a target with a factory.
#[test]
fn second_instance_cases_need_a_factory() {
    let single = Target::single(MockBackend::new());
    match run_case(&single, &case("5.05r")).outcome {
        Outcome::Skipped(reason) => assert!(reason.contains("single instance"), "{reason}"),
        other => panic!("5.05r on a single instance: {other:?}"),
    }
    let factory =
        Target::open(|| MockBackend::with_config(MockConfig::shared(41))).expect("the mock opens");
    assert_eq!(run_case(&factory, &case("5.05r")).outcome, Outcome::Passed);
}

/// A factory whose instances are separate devices (each `MockBackend::new()` is one) breaks
/// the rule that a global capture forbids unsafe calls through every instance of the device:
/// the case that checks it fails.
#[test]
fn instances_of_separate_devices_fail_the_device_wide_rule() {
    let separate = Target::open(|| Ok(MockBackend::new())).expect("the mock opens");
    assert!(matches!(
        run_case(&separate, &case("5.06r")).outcome,
        Outcome::Failed(_)
    ));
    let shared =
        Target::open(|| MockBackend::with_config(MockConfig::shared(42))).expect("the mock opens");
    assert_eq!(run_case(&shared, &case("5.06r")).outcome, Outcome::Passed);
}

/// A factory that hands out the same instance again is refused by `another_instance`.
#[test]
fn a_factory_returning_clones_is_refused() {
    let one = MockBackend::new();
    let target = Target::open(move || Ok(one.clone())).expect("the mock opens");
    let err = target.another_instance().unwrap_err();
    assert!(err.contains("primary instance again"), "{err}");
    assert!(matches!(
        run_case(&target, &case("5.05q")).outcome,
        Outcome::Failed(_)
    ));
}

/// The mock with its stream-order rule switched off (`MockConfig::unordered_pool_reuse`, the
/// fault switch) hands a block freed on one branch of a capture to an unordered branch: the
/// stream-order cases catch it by the blocks' addresses, though the mock's values stay right
/// (it runs a graph's nodes in recording order, where a GPU runs the branches concurrently).
#[test]
fn unordered_pool_reuse_is_caught() {
    let unordered = Target::open(|| {
        MockBackend::with_config(MockConfig {
            unordered_pool_reuse: true,
            ..MockConfig::default()
        })
    })
    .expect("the mock opens");
    for prefix in ["12.01", "12.03"] {
        match run_case(&unordered, &case(prefix)).outcome {
            Outcome::Failed(message) => println!("unordered reuse fails {prefix}: {message}"),
            other => panic!("unordered reuse should fail case {prefix}, got {other:?}"),
        }
    }
    let ordered = Target::open(|| Ok(MockBackend::new())).expect("the mock opens");
    assert_eq!(run_case(&ordered, &case("12.03")).outcome, Outcome::Passed);
}
