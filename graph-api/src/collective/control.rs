//! `ControlPlane`: one rank's side of a communicator's host-side meetings — sharing the id,
//! barriers, and the comparison of what the ranks' captures recorded — each a bounded wait
//! on the [`Store`].

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use super::{CollectiveSignature, CommId, Store};
use crate::{GraphError, Result};

/// What a rank reports at the end of a capture.
const CAPTURED: u8 = 1;
/// What a rank reports when its capture was discarded (an error or panic in its body).
const DISCARDED: u8 = 2;
/// Signatures listed in a mismatch message per rank, at most.
const LISTED: usize = 6;

/// One rank's handle on the host-side meetings of a communicator: every call is *collective*
/// (each rank makes the same calls in the same order) and waits at most the communicator's
/// timeout for the other ranks, then fails with [`GraphError::CommTimeout`] naming the ranks
/// that did not come. Meetings are numbered per topic, so the `n`-th barrier of one rank meets
/// the `n`-th barrier of the others.
///
/// Made by [`Communicator`](super::Communicator); backends get it to compare captures
/// ([`ControlPlane::check_capture`]).
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use accel_graph_api::collective::{ControlPlane, MemoryStore};
/// let store = Arc::new(MemoryStore::new());
/// let ranks: Vec<_> = (0..2)
///     .map(|rank| ControlPlane::new(store.clone(), "doc", rank, 2, Duration::from_secs(5)).unwrap())
///     .collect();
/// let values = std::thread::scope(|s| {
///     let handles: Vec<_> = ranks
///         .iter()
///         .map(|c| s.spawn(move || c.exchange("hello", &[c.rank() as u8])))
///         .collect();
///     handles.into_iter().map(|h| h.join().unwrap()).collect::<Result<Vec<_>, _>>()
/// })?;
/// assert_eq!(values, vec![vec![vec![0], vec![1]]; 2]);
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
pub struct ControlPlane {
    store: Arc<dyn Store>,
    name: String,
    rank: usize,
    world_size: usize,
    timeout: Duration,
    /// The next meeting's number, per topic.
    rounds: Mutex<HashMap<String, u64>>,
}

impl ControlPlane {
    /// Rank `rank` of `world_size` of the communicator `name`, meeting through `store`,
    /// waiting at most `timeout` per meeting. [`GraphError::ArgumentMismatch`] unless
    /// `rank < world_size`.
    pub fn new(
        store: Arc<dyn Store>,
        name: impl Into<String>,
        rank: usize,
        world_size: usize,
        timeout: Duration,
    ) -> Result<Self> {
        let name = name.into();
        if rank >= world_size {
            return Err(GraphError::ArgumentMismatch(format!(
                "communicator {name}: rank {rank} is outside a world of {world_size} rank(s) \
                 (ranks are 0 .. world_size)"
            )));
        }
        Ok(ControlPlane {
            store,
            name,
            rank,
            world_size,
            timeout,
            rounds: Mutex::new(HashMap::new()),
        })
    }

    /// The communicator's name (what its keys start with).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Ranks of the communicator.
    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// The longest a meeting waits for the other ranks.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The number of this rank's next meeting on `topic` (and counts it).
    fn next_round(&self, topic: &str) -> u64 {
        let mut rounds = self.rounds.lock().unwrap_or_else(|e| e.into_inner());
        let round = rounds.entry(topic.to_owned()).or_insert(0);
        let this = *round;
        *round += 1;
        this
    }

    fn key(&self, topic: &str, round: u64, rank: usize) -> String {
        format!("{}/{topic}/{round}/{rank}", self.name)
    }

    /// Every rank contributes `value` to this rank's next meeting on `topic`; returns every
    /// rank's value, in rank order. [`GraphError::CommTimeout`] naming the ranks whose values
    /// did not come within the timeout.
    pub fn exchange(&self, topic: &str, value: &[u8]) -> Result<Vec<Vec<u8>>> {
        let round = self.next_round(topic);
        self.store.set(&self.key(topic, round, self.rank), value)?;
        let started = Instant::now();
        let deadline = started + self.timeout;
        let mut values: Vec<Option<Vec<u8>>> = vec![None; self.world_size];
        values[self.rank] = Some(value.to_vec());
        for rank in (0..self.world_size).filter(|&r| r != self.rank) {
            // Past the deadline `wait` only looks once, so every missing rank is named.
            values[rank] = self.store.wait(&self.key(topic, round, rank), deadline)?;
        }
        let missing: Vec<usize> = (0..self.world_size)
            .filter(|&r| values[r].is_none())
            .collect();
        if !missing.is_empty() {
            return Err(GraphError::CommTimeout {
                communicator: self.name.clone(),
                rank: self.rank,
                operation: format!("{topic} #{round}"),
                missing,
                waited_ms: started.elapsed().as_millis() as u64,
            });
        }
        if round > 0 {
            // Every rank has written round `round`, so every rank is done reading round
            // `round - 1`: this rank's value of it can go (the store stays small).
            let _ = self.store.delete(&self.key(topic, round - 1, self.rank));
        }
        Ok(values.into_iter().flatten().collect())
    }

    /// Contributes `value` to this rank's next meeting on `topic` without waiting for the
    /// others (they find it when they come).
    pub fn publish(&self, topic: &str, value: &[u8]) -> Result<()> {
        let round = self.next_round(topic);
        self.store.set(&self.key(topic, round, self.rank), value)
    }

    /// Waits until every rank has come to this rank's next barrier on `topic`.
    pub fn barrier(&self, topic: &str) -> Result<()> {
        self.exchange(topic, &[]).map(drop)
    }

    /// Tells the other ranks that this rank aborts the communicator, with `reason`. Made
    /// before the device abort: a peer's collective that an abort ends early (NCCL's kernels
    /// then stop reading and writing peers' buffers) is reported through
    /// [`ControlPlane::aborted_peer`] rather than as a completed one.
    pub fn announce_abort(&self, reason: &str) -> Result<()> {
        self.store.set(
            &format!("{}/aborted/{}", self.name, self.rank),
            reason.as_bytes(),
        )
    }

    /// The first other rank that announced an abort, with its reason; `None` if none did.
    pub fn aborted_peer(&self) -> Result<Option<(usize, String)>> {
        for rank in (0..self.world_size).filter(|&r| r != self.rank) {
            if let Some(reason) = self.store.get(&format!("{}/aborted/{rank}", self.name))? {
                return Ok(Some((rank, String::from_utf8_lossy(&reason).into_owned())));
            }
        }
        Ok(None)
    }

    /// The communicator's id: rank 0 makes it with `make` and publishes it; the other ranks
    /// wait for it (bounded). When rank 0 cannot make it, the other ranks fail at once with
    /// [`GraphError::CommUnusable`] carrying rank 0's error, instead of timing out.
    pub fn share_id(&self, make: impl FnOnce() -> Result<CommId>) -> Result<CommId> {
        let round = self.next_round("id");
        let key = self.key("id", round, 0);
        if self.rank == 0 {
            let made = make();
            let value = match &made {
                Ok(id) => [&[1u8][..], id.as_bytes()].concat(),
                Err(e) => [&[0u8][..], e.to_string().as_bytes()].concat(),
            };
            self.store.set(&key, &value)?;
            return made;
        }
        let started = Instant::now();
        match self.store.wait(&key, started + self.timeout)? {
            None => Err(GraphError::CommTimeout {
                communicator: self.name.clone(),
                rank: self.rank,
                operation: format!("id #{round} (from rank 0)"),
                missing: vec![0],
                waited_ms: started.elapsed().as_millis() as u64,
            }),
            Some(value) => match value.split_first() {
                Some((1, id)) => CommId::from_bytes(id),
                Some((_, message)) => Err(GraphError::CommUnusable {
                    communicator: self.name.clone(),
                    rank: self.rank,
                    reason: format!(
                        "rank 0 could not make the communicator's id: {}",
                        String::from_utf8_lossy(message)
                    ),
                }),
                None => Err(self.mismatch("rank 0 published an empty communicator id".into())),
            },
        }
    }

    /// Compares the collectives this rank's capture recorded (`signatures`, in order) with
    /// what every other rank's capture recorded, before the capture ends: `Ok` when all are
    /// equal; [`GraphError::CollectiveMismatch`] naming the first difference when they are
    /// not, or when another rank discarded its capture; [`GraphError::CommTimeout`] when a
    /// rank does not report within the timeout (it captured no collective of this
    /// communicator, or never ended its capture).
    ///
    /// A graph whose ranks recorded different sequences would hang or corrupt memory when
    /// replayed, so backends discard the capture on `Err`.
    pub fn check_capture(&self, signatures: &[CollectiveSignature]) -> Result<()> {
        let all = self.exchange("capture", &encode(CAPTURED, signatures))?;
        let round = self
            .rounds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get("capture")
            .map_or(0, |next| next.saturating_sub(1));
        let mut lists = Vec::with_capacity(all.len());
        for (rank, bytes) in all.iter().enumerate() {
            match decode(bytes) {
                Some((CAPTURED, list)) => lists.push(list),
                Some((_, _)) => {
                    return Err(self.mismatch(format!(
                        "capture #{round}: rank {rank} discarded its capture (its body failed or \
                         panicked) while this rank captured {} collective(s); the capture is \
                         discarded here too",
                        signatures.len()
                    )));
                }
                None => {
                    return Err(self.mismatch(format!(
                        "capture #{round}: rank {rank} reported an unreadable capture signature"
                    )));
                }
            }
        }
        if lists.iter().all(|l| l.as_slice() == signatures) {
            return Ok(());
        }
        let first = (0..)
            .find(|&i| lists.iter().any(|l| l.get(i) != signatures.get(i)))
            .unwrap_or(0);
        let listed: Vec<String> = lists
            .iter()
            .enumerate()
            .map(|(rank, l)| format!("rank {rank}: {}", describe(l, first)))
            .collect();
        Err(self.mismatch(format!(
            "capture #{round}: the ranks captured different collective sequences, first \
             differing at collective #{first} ({}); a replay would hang or corrupt memory, so \
             the capture is discarded on every rank",
            listed.join("; ")
        )))
    }

    /// Tells the other ranks that this rank's capture with `signatures` was discarded (an
    /// error or panic in its body), without waiting: their [`ControlPlane::check_capture`]
    /// fails at once instead of timing out.
    pub fn capture_discarded(&self, signatures: &[CollectiveSignature]) -> Result<()> {
        self.publish("capture", &encode(DISCARDED, signatures))
    }

    fn mismatch(&self, message: String) -> GraphError {
        GraphError::CollectiveMismatch {
            communicator: self.name.clone(),
            rank: self.rank,
            message,
        }
    }
}

impl fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControlPlane")
            .field("name", &self.name)
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("timeout", &self.timeout)
            .field("store", &self.store)
            .finish()
    }
}

/// `marker`, the count, then each signature.
fn encode(marker: u8, signatures: &[CollectiveSignature]) -> Vec<u8> {
    let mut out = vec![marker];
    out.extend_from_slice(&(signatures.len() as u64).to_le_bytes());
    for s in signatures {
        s.encode(&mut out);
    }
    out
}

fn decode(bytes: &[u8]) -> Option<(u8, Vec<CollectiveSignature>)> {
    let (&marker, rest) = bytes.split_first()?;
    let (count, mut rest) = rest.split_at_checked(8)?;
    let count = u64::from_le_bytes(count.try_into().ok()?);
    let mut list = Vec::new();
    for _ in 0..count {
        let (sig, tail) = CollectiveSignature::decode(rest)?;
        list.push(sig);
        rest = tail;
    }
    rest.is_empty().then_some((marker, list))
}

/// A rank's list around index `first`, for a mismatch message.
fn describe(list: &[CollectiveSignature], first: usize) -> String {
    let start = first.saturating_sub(LISTED / 2);
    let shown: Vec<String> = list
        .iter()
        .enumerate()
        .skip(start)
        .take(LISTED)
        .map(|(i, s)| format!("#{i} {s}"))
        .collect();
    let more = list.len().saturating_sub(start + shown.len());
    format!(
        "{} collective(s) [{}{}{}]",
        list.len(),
        if start > 0 { "…, " } else { "" },
        shown.join(", "),
        if more > 0 { ", …" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::{Collective, CommDType, MemoryStore, ReduceOp};

    fn sig(count: usize) -> CollectiveSignature {
        CollectiveSignature {
            collective: Collective::AllReduce(ReduceOp::Sum),
            dtype: CommDType::F32,
            count,
        }
    }

    fn planes(world: usize, timeout: Duration) -> (Arc<MemoryStore>, Vec<ControlPlane>) {
        let store = Arc::new(MemoryStore::new());
        let planes = (0..world)
            .map(|r| ControlPlane::new(store.clone(), "t", r, world, timeout).unwrap())
            .collect();
        (store, planes)
    }

    fn on_each<T: Send>(planes: &[ControlPlane], f: impl Fn(&ControlPlane) -> T + Sync) -> Vec<T> {
        std::thread::scope(|s| {
            let handles: Vec<_> = planes.iter().map(|p| s.spawn(|| f(p))).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn equal_captures_pass_and_different_ones_fail_on_every_rank() {
        let (_, planes) = planes(3, Duration::from_secs(5));
        let ok = on_each(&planes, |p| p.check_capture(&[sig(4), sig(8)]));
        assert!(ok.iter().all(Result::is_ok), "{ok:?}");
        let bad = on_each(&planes, |p| {
            let count = if p.rank() == 2 { 9 } else { 8 };
            p.check_capture(&[sig(4), sig(count)])
        });
        for (rank, result) in bad.iter().enumerate() {
            match result {
                Err(GraphError::CollectiveMismatch {
                    rank: r, message, ..
                }) => {
                    assert_eq!(*r, rank);
                    assert!(message.contains("collective #1"), "{message}");
                    assert!(message.contains("9 x f32"), "{message}");
                }
                other => panic!("rank {rank}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_missing_rank_times_out_and_a_discard_fails_fast() {
        let (_, planes) = planes(2, Duration::from_millis(200));
        let started = Instant::now();
        match planes[0].check_capture(&[sig(1)]) {
            Err(GraphError::CommTimeout { missing, .. }) => assert_eq!(missing, vec![1]),
            other => panic!("{other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(2));
        // Round 1: rank 1 skipped round 0 by reporting nothing there, so it publishes twice.
        planes[1].capture_discarded(&[sig(1)]).unwrap();
        planes[1].capture_discarded(&[sig(1)]).unwrap();
        let started = Instant::now();
        match planes[0].check_capture(&[sig(1)]) {
            Err(GraphError::CollectiveMismatch { message, .. }) => {
                assert!(message.contains("discarded"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        assert!(started.elapsed() < Duration::from_millis(150));
    }

    #[test]
    fn the_id_comes_from_rank_zero_or_its_error_does() {
        let (_, planes) = planes(2, Duration::from_secs(5));
        let id = CommId::from_bytes(&[3; 128]).unwrap();
        let got = on_each(&planes, |p| p.share_id(|| Ok(id.clone())));
        assert!(got.iter().all(|g| g.as_ref().ok() == Some(&id)));
        let failed = on_each(&planes, |p| {
            p.share_id(|| {
                Err(GraphError::Unsupported {
                    what: "no ids".into(),
                })
            })
        });
        assert!(matches!(failed[0], Err(GraphError::Unsupported { .. })));
        match &failed[1] {
            Err(GraphError::CommUnusable { reason, .. }) => assert!(reason.contains("no ids")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn old_rounds_are_deleted() {
        let (store, planes) = planes(2, Duration::from_secs(5));
        for _ in 0..10 {
            on_each(&planes, |p| p.barrier("b").unwrap());
        }
        // The last round of each rank stays (another rank may still be reading it).
        assert_eq!(store.len(), 2);
        assert!(ControlPlane::new(store, "t", 2, 2, Duration::ZERO).is_err());
    }
}
