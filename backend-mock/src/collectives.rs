//! Collectives between simulated devices: the ranks of a communicator are mock instances in
//! one process (one thread per rank). The `n`-th collective a rank runs — eagerly, or as a
//! node of a replay — meets the `n`-th collective of every other rank in memory: each
//! deposits its send bytes and its signature, waits (at most the communicator's timeout) for
//! the others, and computes its result with the reference
//! ([`collective_reference`]: reductions in rank order), so results are deterministic.
//!
//! A GPU would hang on a rank that does not come, or on ranks that issue different
//! collectives; the simulation reports them instead: [`GraphError::CommTimeout`] naming the
//! missing ranks (the communicator is unusable on that rank afterwards), and
//! [`GraphError::CollectiveMismatch`] naming both signatures (the communicator stays usable:
//! every rank took part).

use std::{
    collections::HashMap,
    sync::{
        Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use accel_graph_api::{
    GraphError,
    collective::{
        COMM_ID_BYTES, CollectiveSignature, CommId, MAX_WORLD_SIZE, collective_reference,
        deadline_after,
    },
};
use accel_graph_driver::{
    DriverError, DriverResult,
    api::{CommSpec, DriverCollectives, RawCollective},
};

use crate::{
    MockDevice, kernels::ByteRange, memory::MockBlock, ops::MockCommand, stream::MockStreamState,
};

/// What starts every mock communicator id (the rest: process, counter, time).
const ID_TAG: &[u8] = b"accel-graph mock communicator\0";

/// The communicators of the process, by id: the ranks' instances find each other here.
fn worlds() -> &'static Mutex<HashMap<CommId, Weak<MockWorld>>> {
    static WORLDS: OnceLock<Mutex<HashMap<CommId, Weak<MockWorld>>>> = OnceLock::new();
    WORLDS.get_or_init(Default::default)
}

/// One collective's meeting: each rank's signature and send bytes, and how many ranks took
/// their result.
struct Slot {
    sends: Vec<Option<(CollectiveSignature, Vec<u8>)>>,
    taken: usize,
}

#[derive(Default)]
struct WorldState {
    joined: Vec<bool>,
    /// By collective number.
    slots: HashMap<u64, Slot>,
}

/// The ranks of one communicator.
struct MockWorld {
    name: String,
    size: usize,
    state: Mutex<WorldState>,
    changed: Condvar,
}

impl MockWorld {
    fn lock(&self) -> MutexGuard<'_, WorldState> {
        // Slots are inserted, filled and removed whole under the lock.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One rank of a mock communicator (what `DriverCollectives::Comm` is); clones name the same
/// rank, and recorded collectives hold one.
#[derive(Clone)]
pub struct MockComm(Arc<RankState>);

struct RankState {
    world: Arc<MockWorld>,
    rank: usize,
    timeout: Duration,
    /// The number of this rank's next collective.
    next: AtomicU64,
    /// Why the rank became unusable (a timeout, an abort).
    broken: Mutex<Option<String>>,
}

impl RankState {
    fn broken(&self) -> Option<String> {
        self.broken
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn break_with(&self, reason: String) {
        self.broken
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(reason);
        // A collective of this rank waiting for its peers ends now.
        self.world.changed.notify_all();
    }

    fn unusable(&self, reason: String) -> GraphError {
        GraphError::CommUnusable {
            communicator: self.world.name.clone(),
            rank: self.rank,
            reason,
        }
    }

    /// Meets the other ranks at collective `seq` with `signature` and `send`; returns this
    /// rank's result.
    fn exchange(
        &self,
        seq: u64,
        signature: CollectiveSignature,
        send: Vec<u8>,
    ) -> Result<Vec<u8>, GraphError> {
        let world = &self.world;
        let started = Instant::now();
        // A timeout of `Duration::MAX` waits as long as it takes.
        let deadline = deadline_after(started, self.timeout);
        let mut state = world.lock();
        state
            .slots
            .entry(seq)
            .or_insert_with(|| Slot {
                sends: vec![None; world.size],
                taken: 0,
            })
            .sends[self.rank] = Some((signature, send));
        world.changed.notify_all();
        loop {
            let missing: Vec<usize> = state.slots[&seq]
                .sends
                .iter()
                .enumerate()
                .filter_map(|(r, s)| s.is_none().then_some(r))
                .collect();
            if missing.is_empty() {
                break;
            }
            if let Some(reason) = self.broken() {
                return Err(self.unusable(reason));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(GraphError::CommTimeout {
                    communicator: world.name.clone(),
                    rank: self.rank,
                    operation: format!("{} #{seq}", signature.collective.name()),
                    missing,
                    waited_ms: started.elapsed().as_millis() as u64,
                });
            }
            state = world
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let slot = state
            .slots
            .get_mut(&seq)
            .ok_or_else(|| self.unusable(format!("collective #{seq} vanished")))?;
        let sends: Vec<&(CollectiveSignature, Vec<u8>)> = slot.sends.iter().flatten().collect();
        let result = match sends.iter().enumerate().find(|(_, s)| s.0 != signature) {
            Some((other, theirs)) => Err(GraphError::CollectiveMismatch {
                communicator: world.name.clone(),
                rank: self.rank,
                message: format!(
                    "collective #{seq}: this rank issued {signature}, rank {other} issued {}; \
                     on a GPU the ranks would hang or corrupt memory",
                    theirs.0
                ),
            }),
            None => {
                let bytes: Vec<&[u8]> = sends.iter().map(|s| s.1.as_slice()).collect();
                collective_reference(&signature, &bytes, self.rank)
            }
        };
        slot.taken += 1;
        if slot.taken == world.size {
            state.slots.remove(&seq);
        }
        result
    }
}

impl Drop for RankState {
    fn drop(&mut self) {
        if let Some(joined) = self.world.lock().joined.get_mut(self.rank) {
            *joined = false;
        }
    }
}

/// A collective, run now or recorded as a node.
#[derive(Clone)]
pub(crate) struct CollectiveLaunch {
    comm: MockComm,
    signature: CollectiveSignature,
    send: ByteRange,
    recv: ByteRange,
}

impl CollectiveLaunch {
    /// The bytes it reads and the bytes it writes.
    pub(crate) fn ranges(&self) -> [&ByteRange; 2] {
        [&self.send, &self.recv]
    }

    /// Blocks the collective touches, for the sanitizers.
    pub(crate) fn blocks(&self) -> [&Arc<MockBlock>; 2] {
        [&self.send.block, &self.recv.block]
    }

    /// The node label.
    pub(crate) fn label(&self) -> String {
        let rank = &self.comm.0;
        format!(
            "{} (communicator {}, rank {} of {}) send={} recv={}",
            self.signature, rank.world.name, rank.rank, rank.world.size, self.send, self.recv
        )
    }

    /// Meets the other ranks and writes this rank's result.
    pub(crate) fn run(&self) -> DriverResult<()> {
        let rank = &self.comm.0;
        if let Some(reason) = rank.broken() {
            return Err(DriverError::Api(rank.unusable(reason)));
        }
        let seq = rank.next.fetch_add(1, Ordering::Relaxed);
        match rank.exchange(seq, self.signature, self.send.read()) {
            Ok(out) => {
                self.recv.write(&out);
                Ok(())
            }
            Err(e) => {
                if matches!(e, GraphError::CommTimeout { .. }) {
                    rank.break_with(e.to_string());
                }
                Err(DriverError::Api(e))
            }
        }
    }
}

impl DriverCollectives for MockDevice {
    type Comm = MockComm;

    fn comm_support(&self) -> DriverResult<()> {
        self.alive()
    }

    fn comm_unique_id(&self) -> DriverResult<CommId> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        self.alive()?;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let mut bytes = [0u8; COMM_ID_BYTES];
        let fields = [
            ID_TAG,
            &std::process::id().to_le_bytes(),
            &NEXT.fetch_add(1, Ordering::Relaxed).to_le_bytes(),
            &nanos.to_le_bytes(),
        ]
        .concat();
        bytes[..fields.len()].copy_from_slice(&fields);
        Ok(CommId::from_bytes(&bytes)?)
    }

    fn comm_init(&self, spec: CommSpec<'_>) -> DriverResult<MockComm> {
        self.alive()?;
        // The communicator checked these; the tables below are sized by the world, so a
        // spec from elsewhere is checked again before anything is allocated.
        if spec.world_size > MAX_WORLD_SIZE || spec.rank >= spec.world_size {
            return Err(DriverError::Api(GraphError::ArgumentMismatch(format!(
                "communicator {}: rank {} of a world of {} rank(s) (at most {MAX_WORLD_SIZE})",
                spec.name, spec.rank, spec.world_size
            ))));
        }
        let world = {
            let mut worlds = worlds().lock().unwrap_or_else(|e| e.into_inner());
            worlds.retain(|_, w| w.strong_count() > 0);
            match worlds.get(spec.id).and_then(Weak::upgrade) {
                Some(world) => world,
                None => {
                    let world = Arc::new(MockWorld {
                        name: spec.name.to_owned(),
                        size: spec.world_size,
                        state: Mutex::new(WorldState {
                            joined: vec![false; spec.world_size],
                            slots: HashMap::new(),
                        }),
                        changed: Condvar::new(),
                    });
                    worlds.insert(spec.id.clone(), Arc::downgrade(&world));
                    world
                }
            }
        };
        if world.size != spec.world_size {
            return Err(DriverError::Api(GraphError::CollectiveMismatch {
                communicator: spec.name.to_owned(),
                rank: spec.rank,
                message: format!(
                    "this rank joined with a world of {} rank(s), others with {}",
                    spec.world_size, world.size
                ),
            }));
        }
        {
            let mut state = world.lock();
            match state.joined.get_mut(spec.rank) {
                Some(joined) if !*joined => *joined = true,
                _ => {
                    return Err(DriverError::Api(GraphError::ArgumentMismatch(format!(
                        "communicator {}: rank {} joined twice (every rank joins once, on its \
                         own device)",
                        spec.name, spec.rank
                    ))));
                }
            }
        }
        Ok(MockComm(Arc::new(RankState {
            world,
            rank: spec.rank,
            timeout: spec.timeout,
            next: AtomicU64::new(0),
            broken: Mutex::new(None),
        })))
    }

    unsafe fn collective(
        &self,
        comm: &MockComm,
        call: RawCollective<'_, Arc<MockBlock>>,
        stream: &Arc<MockStreamState>,
    ) -> DriverResult<()> {
        let launch = CollectiveLaunch {
            comm: comm.clone(),
            signature: call.signature,
            send: ByteRange::of(call.send),
            recv: ByteRange::of(call.recv),
        };
        self.issue(stream, MockCommand::Collective(Arc::new(launch)))
    }

    fn comm_error(&self, comm: &MockComm) -> Option<String> {
        comm.0.broken()
    }

    fn comm_abort(&self, comm: &MockComm, reason: &str) {
        comm.0.break_with(format!("aborted: {reason}"));
    }
}
