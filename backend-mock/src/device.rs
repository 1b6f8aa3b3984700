//! `Device`: the state one simulated device shares between a backend's clones and its graphs —
//! memory, streams, captures in progress, counters and armed faults.

use std::sync::{
    Arc, Mutex, MutexGuard,
    atomic::{AtomicU64, Ordering},
};

use accel_graph_api::{
    CaptureErrorMode, CurrentStream, GraphError, PoolId, Result,
    capture_rules::{CaptureId, CaptureRules},
    pools::MemoryPools,
};

use crate::{
    MockBuffer, MockConfig, MockEvent, MockStream, counters::Counters, faults::Faults,
    memory::MockAllocator, op::Op, raw_graph::RawGraph,
};

/// Process-wide source of backend instance ids (never 0).
static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

/// One simulated stream.
#[derive(Debug, Default)]
pub(crate) struct StreamSlot {
    /// The capture the stream takes part in (as origin, or pulled in by an event wait).
    pub(crate) capture: Option<CaptureId>,
    /// During capture: the nodes the stream's next work depends on.
    pub(crate) tail: Vec<usize>,
}

/// A capture in progress.
pub(crate) struct CaptureState {
    pub(crate) id: CaptureId,
    pub(crate) origin: usize,
    pub(crate) mode: CaptureErrorMode,
    pub(crate) pool: PoolId,
    pub(crate) graph: RawGraph,
    /// Streams taking part (origin first).
    pub(crate) members: Vec<usize>,
}

/// Streams and captures, behind one lock.
pub(crate) struct DeviceState {
    pub(crate) streams: Vec<StreamSlot>,
    pub(crate) captures: Vec<CaptureState>,
}

impl DeviceState {
    pub(crate) fn capture_mut(&mut self, id: CaptureId) -> Option<&mut CaptureState> {
        self.captures.iter_mut().find(|c| c.id == id)
    }

    pub(crate) fn capture(&self, id: CaptureId) -> Option<&CaptureState> {
        self.captures.iter().find(|c| c.id == id)
    }

    /// Removes capture `id` and takes every stream out of it.
    pub(crate) fn remove_capture(&mut self, id: CaptureId) -> Option<CaptureState> {
        let pos = self.captures.iter().position(|c| c.id == id)?;
        let capture = self.captures.remove(pos);
        for &s in &capture.members {
            let slot = &mut self.streams[s];
            slot.capture = None;
            slot.tail.clear();
        }
        Some(capture)
    }
}

/// The shared core of a [`crate::MockBackend`].
pub(crate) struct Device {
    pub(crate) id: u64,
    pub(crate) config: MockConfig,
    pub(crate) pools: Arc<MemoryPools<MockAllocator>>,
    pub(crate) current: CurrentStream<MockStream>,
    pub(crate) rules: CaptureRules,
    pub(crate) state: Mutex<DeviceState>,
    pub(crate) counters: Counters,
    pub(crate) faults: Faults,
    pub(crate) next_event: AtomicU64,
}

impl Device {
    pub(crate) fn new(config: MockConfig) -> Self {
        let id = NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed);
        let allocator = MockAllocator::new(
            config.base_address,
            config.memory_capacity,
            config.poison_new_memory,
        );
        Device {
            id,
            pools: MemoryPools::new(allocator),
            current: CurrentStream::new(MockStream {
                device: id,
                index: 0,
            }),
            rules: CaptureRules::default(),
            state: Mutex::new(DeviceState {
                streams: vec![StreamSlot::default()],
                captures: Vec::new(),
            }),
            counters: Counters::default(),
            faults: Faults::default(),
            next_event: AtomicU64::new(1),
            config,
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, DeviceState> {
        // Nothing panics while the lock is held; if a caller's panic ever poisoned it, the
        // state is still consistent, so keep going rather than panic in turn.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn check_stream(&self, stream: &MockStream) -> Result<()> {
        if stream.device == self.id {
            Ok(())
        } else {
            Err(GraphError::ForeignObject { what: "stream" })
        }
    }

    pub(crate) fn check_buffer(&self, buffer: &MockBuffer) -> Result<()> {
        if buffer.device == self.id {
            Ok(())
        } else {
            Err(GraphError::ForeignObject { what: "buffer" })
        }
    }

    pub(crate) fn check_event(&self, event: &MockEvent) -> Result<()> {
        if event.device == self.id {
            Ok(())
        } else {
            Err(GraphError::ForeignObject { what: "event" })
        }
    }

    /// The calling thread's current stream, checked to be ours.
    pub(crate) fn current_stream(&self) -> Result<MockStream> {
        let stream = self.current.get();
        self.check_stream(&stream)?;
        Ok(stream)
    }

    /// Errors with `CaptureInvalidated` if capture `id` was invalidated.
    pub(crate) fn ensure_valid(&self, id: CaptureId) -> Result<()> {
        match self.rules.invalidation(id) {
            Some(reason) => Err(GraphError::CaptureInvalidated { reason }),
            None => Ok(()),
        }
    }

    /// Issues `op` on the current stream: recorded if the stream is capturing, else run now.
    pub(crate) fn submit(&self, op: Op) -> Result<()> {
        let stream = self.current_stream()?;
        {
            let mut state = self.lock();
            let DeviceState { streams, captures } = &mut *state;
            let slot = &mut streams[stream.index];
            if let Some(id) = slot.capture {
                self.ensure_valid(id)?;
                let Some(capture) = captures.iter_mut().find(|c| c.id == id) else {
                    return Err(GraphError::CaptureInvalidated {
                        reason: "the capture is over".to_owned(),
                    });
                };
                let node = capture.graph.push(op, &slot.tail);
                slot.tail.clear();
                slot.tail.push(node);
                Counters::bump(&self.counters.captured_ops, 1);
                return Ok(());
            }
        }
        // Run without the lock: a host callback may call back into the backend.
        op.execute();
        Counters::bump(&self.counters.eager_ops, 1);
        Ok(())
    }

    /// Begins a capture on `stream`.
    pub(crate) fn begin_capture(
        &self,
        stream: &MockStream,
        pool: PoolId,
        mode: CaptureErrorMode,
    ) -> Result<CaptureId> {
        self.check_stream(stream)?;
        if stream.is_default() {
            return Err(GraphError::StreamNotCapturable);
        }
        let mut state = self.lock();
        if state.streams[stream.index].capture.is_some() {
            return Err(accel_graph_api::EmulatedCudaError::IllegalState.error(
                "mock",
                format!("stream {} is capturing already", stream.index),
            ));
        }
        let id = self.rules.begin(mode);
        state.captures.push(CaptureState {
            id,
            origin: stream.index,
            mode: mode.resolved(),
            pool,
            graph: RawGraph::default(),
            members: vec![stream.index],
        });
        let slot = &mut state.streams[stream.index];
        slot.capture = Some(id);
        slot.tail.clear();
        Ok(id)
    }

    /// Ends capture `id` (thread and stream already checked): no stream of it is capturing
    /// afterwards, whatever the outcome.
    pub(crate) fn end_capture(&self, id: CaptureId) -> Result<RawGraph> {
        let mut state = self.lock();
        let origin_tail = state
            .capture(id)
            .map(|c| state.streams[c.origin].tail.clone())
            .unwrap_or_default();
        let capture = state.remove_capture(id);
        drop(state);
        let invalidated = self.rules.end(id);
        let Some(capture) = capture else {
            return Err(GraphError::NotCapturing);
        };
        if let Some(reason) = invalidated {
            return Err(GraphError::CaptureInvalidated { reason });
        }
        if capture.graph.has_unjoined_work(&origin_tail) {
            return Err(GraphError::CaptureUnjoined);
        }
        Ok(capture.graph)
    }

    /// Ends capture `id` and discards it (reset, drop mid-capture, failed end).
    pub(crate) fn abort_capture(&self, id: CaptureId) {
        let removed = self.lock().remove_capture(id);
        self.rules.end(id);
        // The recorded ops (and the memory references they hold) go here, outside the lock.
        drop(removed);
    }

    /// The origin stream of capture `id`, if it is in progress.
    pub(crate) fn capture_origin(&self, id: CaptureId) -> Option<usize> {
        self.lock().capture(id).map(|c| c.origin)
    }

    /// The capture `stream` takes part in, if any.
    pub(crate) fn stream_capture(&self, stream: &MockStream) -> Result<Option<CaptureId>> {
        self.check_stream(stream)?;
        Ok(self.lock().streams[stream.index].capture)
    }
}
