//! Stream capture in software: CUDA's rules, through the driver layer's software capture,
//! over fully resolved commands.

use accel_graph_api::CaptureErrorMode;
use accel_graph_driver::{DriverResult, api::DriverCapture};

use crate::{WgpuDevice, graph::WgpuRawGraph, stream::WgpuStreamState};

impl DriverCapture for WgpuDevice {
    type Graph = WgpuRawGraph;

    unsafe fn begin_capture(
        &self,
        stream: &WgpuStreamState,
        _mode: CaptureErrorMode,
    ) -> DriverResult<()> {
        self.capture.begin(stream.key())
    }

    unsafe fn end_capture(&self, stream: &WgpuStreamState) -> DriverResult<WgpuRawGraph> {
        Ok(WgpuRawGraph::new(self.capture.end(stream.key())?))
    }

    /// wgpu has no capture modes: they are enforced by the driver layer's rules alone.
    fn exchange_capture_mode(&self, mode: CaptureErrorMode) -> DriverResult<CaptureErrorMode> {
        Ok(mode)
    }
}
