//! `StaticBufferLoader`: Megatron's loader of step inputs into per-stage static buffers — the
//! fixed addresses a full-iteration graph reads.

use accel_graph_api::{Backend, DeviceBuffer, GraphError, Result};

use crate::{arguments::check_inputs, stage::Stage};

/// Per-stage, per-microbatch static input buffers.
///
/// The first load of a microbatch allocates its buffers; later loads copy into them. Copies
/// run on the loader's own stream, ordered by events: the loader stream waits for the caller's
/// current stream (the inputs are ready), copies, and the current stream waits for the copies
/// (so the next replay reads complete inputs).
///
/// ```
/// use accel_graph_api::{Backend, DeviceBuffer, PortableOps};
/// use accel_graph_utils::{Stage, StaticBufferLoader};
/// use accel_graph_mock::MockBackend;
///
/// let backend = MockBackend::new();
/// let mut loader = StaticBufferLoader::new(&backend)?;
/// let a = backend.alloc_from(&[1.0, 2.0])?;
/// let first = loader.load(Stage::Training, 0, &[&a])?[0].device_address();
/// let b = backend.alloc_from(&[3.0, 4.0])?;
/// let again = &loader.load(Stage::Training, 0, &[&b])?[0];
/// assert_eq!(again.device_address(), first); // same static buffer, new contents
/// assert_eq!(backend.download(again)?, vec![3.0, 4.0]);
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
#[derive(Debug)]
pub struct StaticBufferLoader<B: Backend> {
    backend: B,
    stream: B::Stream,
    inputs_ready: B::Event,
    copies_done: B::Event,
    /// `[stage][microbatch][input]`.
    buffers: [Vec<Vec<B::Buffer<f32>>>; 2],
}

impl<B: Backend> StaticBufferLoader<B> {
    /// A loader with its own copy stream and no buffers yet.
    pub fn new(backend: &B) -> Result<Self> {
        Ok(StaticBufferLoader {
            backend: backend.clone(),
            stream: backend.new_stream()?,
            inputs_ready: backend.new_event()?,
            copies_done: backend.new_event()?,
            buffers: [Vec::new(), Vec::new()],
        })
    }

    /// Loads `inputs` into the static buffers of `microbatch` of `stage` and returns them.
    ///
    /// Microbatches are loaded in order: `microbatch` may be at most the number already loaded
    /// for the stage (that number allocates a new microbatch). Errors with
    /// [`GraphError::ArgumentMismatch`] beyond that, or when `inputs` differ in count or
    /// lengths from the buffers of an existing microbatch.
    pub fn load(
        &mut self,
        stage: Stage,
        microbatch: usize,
        inputs: &[&B::Buffer<f32>],
    ) -> Result<&[B::Buffer<f32>]> {
        let loaded = self.buffers[stage.index()].len();
        if microbatch > loaded {
            return Err(GraphError::ArgumentMismatch(format!(
                "StaticBufferLoader: microbatch {microbatch} of stage {stage} loaded before \
                 microbatch {loaded}: load microbatches in order"
            )));
        }
        if microbatch == loaded {
            // A first load allocates the microbatch's buffers; they are registered only once
            // the copy into them was issued, so a failed load changes nothing.
            let fresh = inputs
                .iter()
                .map(|input| self.backend.alloc(input.len()))
                .collect::<Result<Vec<_>>>()?;
            self.copy_in(&fresh, inputs)?;
            self.buffers[stage.index()].push(fresh);
        } else {
            let existing = &self.buffers[stage.index()][microbatch];
            check_inputs(
                || format!("static buffers of stage {stage}, microbatch {microbatch}"),
                existing.iter().map(|b| b.len()),
                inputs,
            )?;
            self.copy_in(existing, inputs)?;
        }
        Ok(&self.buffers[stage.index()][microbatch])
    }

    /// Copies `inputs` into `statics` on the loader's stream, ordered after the caller's
    /// current stream and before its next work. An input that is the static buffer itself
    /// (same memory of the same instance) is not copied; a buffer of another instance is
    /// refused.
    fn copy_in(&self, statics: &[B::Buffer<f32>], inputs: &[&B::Buffer<f32>]) -> Result<()> {
        if inputs
            .iter()
            .any(|b| b.instance_id() != self.backend.instance_id())
        {
            return Err(GraphError::ForeignObject { what: "buffer" });
        }
        self.backend.record_event(&self.inputs_ready)?;
        {
            let _copy_stream = self.backend.use_stream(&self.stream)?;
            self.backend.wait_event(&self.inputs_ready)?;
            for (dst, src) in statics.iter().zip(inputs) {
                if !dst.same_memory(src) {
                    self.backend.copy(dst, *src)?;
                }
            }
            self.backend.record_event(&self.copies_done)?;
        }
        self.backend.wait_event(&self.copies_done)
    }

    /// Loads every microbatch of a step (`microbatches[m]` are the inputs of microbatch `m`)
    /// and returns the stage's static buffers.
    pub fn load_all(
        &mut self,
        stage: Stage,
        microbatches: &[&[&B::Buffer<f32>]],
    ) -> Result<&[Vec<B::Buffer<f32>>]> {
        for (m, inputs) in microbatches.iter().enumerate() {
            self.load(stage, m, inputs)?;
        }
        Ok(&self.buffers[stage.index()])
    }

    /// The static buffers of `stage`: `[microbatch][input]`.
    pub fn buffers(&self, stage: Stage) -> &[Vec<B::Buffer<f32>>] {
        &self.buffers[stage.index()]
    }

    /// Drops the static buffers of `stage` (the next load allocates again).
    pub fn clear(&mut self, stage: Stage) {
        self.buffers[stage.index()].clear();
    }
}
