//! Event record / wait / synchronize on the device: CUDA's fork/join rules during capture.

use accel_graph_api::{GraphError, Result};

use crate::{MockEvent, device::Device, event::EventState};

impl Device {
    /// Records `event` on the current stream.
    pub(crate) fn record_event(&self, event: &MockEvent) -> Result<()> {
        self.check_event(event)?;
        let stream = self.current_stream()?;
        let state = self.lock();
        let slot = &state.streams[stream.index];
        let recorded = match slot.capture {
            None => EventState::Recorded,
            Some(capture) => {
                self.ensure_valid(capture)?;
                EventState::Captured {
                    capture,
                    nodes: slot.tail.clone(),
                }
            }
        };
        *event.state.lock().unwrap_or_else(|e| e.into_inner()) = recorded;
        Ok(())
    }

    /// Makes the current stream wait for `event`.
    pub(crate) fn wait_event(&self, event: &MockEvent) -> Result<()> {
        self.check_event(event)?;
        let stream = self.current_stream()?;
        let mut state = self.lock();
        let recorded = event
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let waiting_in = state.streams[stream.index].capture;
        match (recorded, waiting_in) {
            (EventState::NeverRecorded, _) | (EventState::Recorded, None) => Ok(()),
            (EventState::Recorded, Some(capture)) => {
                self.ensure_valid(capture)?;
                let err = accel_graph_api::EmulatedCudaError::CaptureIsolation.error(
                    "mock",
                    "a capturing stream waited on an event recorded outside the capture",
                );
                self.rules.invalidate(capture, err.to_string());
                Err(err)
            }
            (EventState::Captured { capture, nodes }, None) => {
                if state.capture(capture).is_none() {
                    return Err(accel_graph_api::EmulatedCudaError::CaptureIsolation.error(
                        "mock",
                        "waited outside capture on an event recorded inside a capture",
                    ));
                }
                if stream.is_default() {
                    // The default stream never takes part in a capture, so to it the event
                    // lies outside its reach, as for an ended capture. The capture itself is
                    // untouched: none of its streams did anything wrong.
                    return Err(accel_graph_api::EmulatedCudaError::CaptureIsolation.error(
                        "mock",
                        "the default stream waited on an event recorded in a capture (the \
                         default stream cannot join a capture)",
                    ));
                }
                self.ensure_valid(capture)?;
                // Fork: the stream joins the capture, after the event's nodes.
                let slot = &mut state.streams[stream.index];
                slot.capture = Some(capture);
                slot.tail = nodes;
                if let Some(c) = state.capture_mut(capture) {
                    c.members.push(stream.index);
                }
                Ok(())
            }
            (EventState::Captured { capture, nodes }, Some(own)) => {
                self.ensure_valid(own)?;
                if capture != own {
                    let err = accel_graph_api::EmulatedCudaError::CaptureMerge.error(
                        "mock",
                        "a capturing stream waited on an event recorded in another capture",
                    );
                    self.rules.invalidate(own, err.to_string());
                    return Err(err);
                }
                // Join: the stream's next work also depends on the event's nodes.
                let tail = &mut state.streams[stream.index].tail;
                for n in nodes {
                    if !tail.contains(&n) {
                        tail.push(n);
                    }
                }
                tail.sort_unstable();
                Ok(())
            }
        }
    }

    /// Blocks until `event` completes: an unsafe call during capture; an error on an event
    /// recorded in a capture (it stands for no real work).
    pub(crate) fn event_synchronize(&self, event: &MockEvent) -> Result<()> {
        self.check_event(event)?;
        self.rules.check_unsafe_call("event_synchronize")?;
        let recorded = event
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match recorded {
            EventState::Captured { .. } => Err(accel_graph_api::EmulatedCudaError::CapturedEvent
                .error(
                    "mock",
                    "event_synchronize on an event recorded in a capture",
                )),
            EventState::NeverRecorded | EventState::Recorded => Ok(()),
        }
    }

    /// A blocking wait for `stream` (`stream_synchronize`, and the blocking copies `upload` and
    /// `download` on the current stream): on a capturing stream always an error that
    /// invalidates the capture, in every mode (on CUDA the copy cannot be captured from
    /// pageable memory and the synchronize conflicts with the capture); elsewhere an unsafe
    /// call named `operation`.
    pub(crate) fn wait_for_stream(
        &self,
        stream: &crate::MockStream,
        operation: &'static str,
    ) -> Result<()> {
        self.check_stream(stream)?;
        let state = self.lock();
        if let Some(id) = state.streams[stream.index].capture {
            let mode = state
                .capture(id)
                .map(|c| c.mode)
                .unwrap_or_default()
                .resolved();
            drop(state);
            self.rules
                .invalidate(id, format!("{operation} on a capturing stream"));
            return Err(GraphError::UnsafeDuringCapture {
                operation: operation.to_owned(),
                mode,
            });
        }
        drop(state);
        self.rules.check_unsafe_call(operation)
    }
}
