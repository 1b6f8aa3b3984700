//! The suite has teeth: the mock with one deliberate flaw must fail the cases that pin that
//! behaviour down (and a faithful delegate must pass them).

use std::sync::{Arc, Mutex};

use accel_graph_api::{
    Backend, BackendKind, Capabilities, GraphOptions, HostCallback, MemoryStats, Result,
};
use accel_graph_conformance::{Outcome, cases, run_case};
use accel_graph_mock::MockBackend;

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
    leaked: Arc<Mutex<Vec<<MockBackend as Backend>::Buffer>>>,
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

impl Backend for Mutant {
    type Stream = <MockBackend as Backend>::Stream;
    type Event = <MockBackend as Backend>::Event;
    type Buffer = <MockBackend as Backend>::Buffer;
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
    fn default_stream(&self) -> Self::Stream {
        self.inner.default_stream()
    }
    fn new_stream(&self) -> Result<Self::Stream> {
        self.inner.new_stream()
    }
    fn current_stream(&self) -> Self::Stream {
        self.inner.current_stream()
    }
    fn set_current_stream(&self, stream: &Self::Stream) -> Self::Stream {
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
    fn new_event(&self) -> Result<Self::Event> {
        self.inner.new_event()
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
    fn alloc(&self, len: usize) -> Result<Self::Buffer> {
        self.inner.alloc(len)
    }
    fn upload(&self, dst: &Self::Buffer, src: &[f32]) -> Result<()> {
        self.inner.upload(dst, src)
    }
    fn download(&self, src: &Self::Buffer) -> Result<Vec<f32>> {
        self.inner.download(src)
    }
    fn memory_stats(&self) -> MemoryStats {
        self.inner.memory_stats()
    }
    fn fill(&self, x: &Self::Buffer, value: f32) -> Result<()> {
        self.inner.fill(x, value)
    }
    fn copy(&self, dst: &Self::Buffer, src: &Self::Buffer) -> Result<()> {
        self.inner.copy(dst, src)
    }
    fn add_scalar(&self, x: &Self::Buffer, c: f32) -> Result<()> {
        match self.flaw {
            Flaw::AddScalarOff => self.inner.add_scalar(x, c + 1.0 / 1024.0),
            _ => self.inner.add_scalar(x, c),
        }
    }
    fn scale(&self, x: &Self::Buffer, a: f32) -> Result<()> {
        let capturing = self.inner.is_capturing(&self.inner.current_stream())?;
        match self.flaw {
            Flaw::ScaleNotCaptured if capturing => Ok(()),
            _ => self.inner.scale(x, a),
        }
    }
    fn axpy(&self, y: &Self::Buffer, a: f32, x: &Self::Buffer) -> Result<()> {
        self.inner.axpy(y, a, x)
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
    fn graph_pool_handle(&self) -> accel_graph_api::PoolId {
        self.inner.graph_pool_handle()
    }
}

/// The outcome of the case whose name starts with `prefix` on a mock with `flaw`.
fn outcome(flaw: Flaw, prefix: &str) -> Outcome {
    let backend = Mutant::new(flaw);
    let case = cases::<Mutant>()
        .into_iter()
        .find(|c| c.name.starts_with(prefix))
        .unwrap_or_else(|| panic!("no case {prefix}"));
    run_case(&backend, &case).outcome
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
    let case = cases::<Mutant>()
        .into_iter()
        .find(|c| c.name.starts_with("5.01c"))
        .expect("host callback case");
    assert_eq!(
        case.skip_reason(&caps).as_deref(),
        Some("backend has no host callbacks")
    );
}

/// An unavailable backend: every trial is ignored, none passes, none fails.
#[test]
fn unavailable_backend_ignores_every_case() {
    use accel_graph_conformance::libtest_mimic::{Arguments, run};
    let trials = accel_graph_conformance::trials::<Mutant>(Err(
        accel_graph_api::GraphError::BackendUnavailable {
            backend: "mock",
            reason: "switched off for this test".into(),
        },
    ));
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
