//! `Context`: the state one [`crate::WgpuBackend`] and its clones share.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use accel_graph_api::{CurrentStream, capture_rules::CaptureRules, pools::MemoryPools};

use crate::{gpu::Gpu, memory::WgpuAllocator, stream::WgpuStream};

/// Backend instance ids carry the backend's tag in the top byte so they never collide with
/// another backend's ids in process-wide maps.
const INSTANCE_TAG: u64 = 0x57 << 56;
static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

pub(crate) struct Context {
    pub(crate) gpu: Arc<Gpu>,
    pub(crate) instance: u64,
    pub(crate) pools: Arc<MemoryPools<WgpuAllocator>>,
    pub(crate) rules: CaptureRules,
    pub(crate) current: CurrentStream<WgpuStream>,
    next_stream: AtomicU64,
    next_event: AtomicU64,
}

impl Context {
    pub(crate) fn new(gpu: Arc<Gpu>) -> Self {
        let instance = INSTANCE_TAG | NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed);
        let default_stream = WgpuStream::new(0, instance, false);
        Context {
            pools: MemoryPools::new(WgpuAllocator::new(Arc::clone(&gpu))),
            gpu,
            instance,
            rules: CaptureRules::default(),
            current: CurrentStream::new(default_stream),
            next_stream: AtomicU64::new(1),
            next_event: AtomicU64::new(1),
        }
    }

    pub(crate) fn next_stream_id(&self) -> u64 {
        self.next_stream.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn next_event_id(&self) -> u64 {
        self.next_event.fetch_add(1, Ordering::Relaxed)
    }
}
