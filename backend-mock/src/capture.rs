//! Simulated stream capture: CUDA's rules, through the driver layer's software capture.

use accel_graph_api::CaptureErrorMode;
use accel_graph_driver::{DriverResult, api::DriverCapture};

use crate::{MockDevice, graph::MockRawGraph, stream::MockStreamState};

impl DriverCapture for MockDevice {
    type Graph = MockRawGraph;

    unsafe fn begin_capture(
        &self,
        stream: &std::sync::Arc<MockStreamState>,
        _mode: CaptureErrorMode,
    ) -> DriverResult<()> {
        self.alive()?;
        self.capture.begin(stream.index())
    }

    unsafe fn end_capture(
        &self,
        stream: &std::sync::Arc<MockStreamState>,
    ) -> DriverResult<MockRawGraph> {
        self.alive()?;
        Ok(MockRawGraph {
            nodes: self.capture.end(stream.index())?,
        })
    }

    /// The mock enforces capture modes through the driver layer's rules alone, as a driver
    /// without modes of its own.
    fn exchange_capture_mode(&self, mode: CaptureErrorMode) -> DriverResult<CaptureErrorMode> {
        Ok(mode)
    }
}
