//! `ControlPlane`: one rank's side of a communicator's host-side meetings — sharing the id,
//! barriers, and the comparison of what the ranks' captures recorded — each a bounded wait
//! on the [`Store`].

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use super::{CollectiveSignature, CommId, Store, store::deadline_after};
use crate::{GraphError, Result};

/// The most ranks a communicator serves. Every meeting of the ranks reads one key per rank on
/// every rank (host work and store traffic growing with the square of the world), and joining
/// sizes per-rank tables by it, so a world beyond this is refused before anything is made
/// for it.
pub const MAX_WORLD_SIZE: usize = 65_536;

/// What a rank reports at the end of a capture.
const CAPTURED: u8 = 1;
/// What a rank reports when its capture was discarded (an error or panic in its body).
const DISCARDED: u8 = 2;
/// Signatures listed in a mismatch message per rank, at most.
const LISTED: usize = 6;
/// Bytes of a rank's claim of its place: its world size.
const CLAIM_BYTES: usize = 8;

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
    /// waiting at most `timeout` per meeting ([`Duration::MAX`]: as long as it takes).
    /// [`GraphError::ArgumentMismatch`] unless `rank < world_size <=`
    /// [`MAX_WORLD_SIZE`].
    pub fn new(
        store: Arc<dyn Store>,
        name: impl Into<String>,
        rank: usize,
        world_size: usize,
        timeout: Duration,
    ) -> Result<Self> {
        let name = name.into();
        if world_size > MAX_WORLD_SIZE {
            return Err(GraphError::ArgumentMismatch(format!(
                "communicator {name}: a world of {world_size} ranks is more than the \
                 {MAX_WORLD_SIZE} a communicator serves"
            )));
        }
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
        let deadline = deadline_after(started, self.timeout);
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

    /// Claims this rank's place in the communicator's name (`<name>/rank/<rank>`, atomically:
    /// [`Store::set_if_absent`]), then meets every rank (bounded by the timeout) — before
    /// anything else of the communicator is written to the store or made on a device.
    ///
    /// A place already held (another communicator of the same name on this store, a rank
    /// joining twice, a store left by an earlier launch) is [`GraphError::CommNameClash`],
    /// and the name is marked clashed (`<name>/clash`) so that ranks of the communicator
    /// holding it which are still joining fail too: the holders are not necessarily all of one
    /// group (two groups racing for the name can each win some places). Every rank meeting
    /// here reports whether it saw the mark, and all of them fail alike if one did;
    /// [`ControlPlane::confirm_join`] repeats that check once the communicator is made.
    /// Ranks of different world sizes are [`GraphError::CollectiveMismatch`].
    pub(crate) fn join(&self) -> Result<()> {
        let claim = self.claim();
        if let Some(held) = self.store.set_if_absent(&self.place_key(), &claim)? {
            let holder = match <[u8; CLAIM_BYTES]>::try_from(held.as_slice()) {
                Ok(world) => format!("another rank (of a world of {})", u64::from_le_bytes(world)),
                Err(_) => "another rank".to_owned(),
            };
            let found = format!("rank {}'s place is held by {holder}", self.rank);
            // Best effort: this rank's error stands whether or not the mark is written.
            let _ = self.store.set(&self.clash_key(), found.as_bytes());
            return Err(self.name_clash(format!(
                "{found}: another communicator of this name, this rank joining twice, or a \
                 store an earlier launch left"
            )));
        }
        self.agree("join")
    }

    /// The last step of joining, once the device communicator is made and warmed up: every
    /// rank reports whether the name was marked clashed meanwhile (a rank of another
    /// communicator of the name came after [`ControlPlane::join`]'s meeting), and all fail
    /// alike with [`GraphError::CommNameClash`] if one saw it.
    pub(crate) fn confirm_join(&self) -> Result<()> {
        self.agree("joined")
    }

    /// This rank's claim of its place: its world size (which a rank finding the place taken
    /// reports).
    fn claim(&self) -> Vec<u8> {
        (self.world_size as u64).to_le_bytes().to_vec()
    }

    fn place_key(&self) -> String {
        format!("{}/rank/{}", self.name, self.rank)
    }

    fn clash_key(&self) -> String {
        format!("{}/clash", self.name)
    }

    /// Meets every rank on `topic`, each with its claim and whether it saw the name marked
    /// clashed; every rank decides from the same values, so all fail or none does.
    fn agree(&self, topic: &str) -> Result<()> {
        let mark = self.store.get(&self.clash_key())?;
        let mut value = self.claim();
        value.push(u8::from(mark.is_some()));
        let all = self.exchange(topic, &value)?;
        for (rank, value) in all.iter().enumerate() {
            let world = (value.len() == CLAIM_BYTES + 1)
                .then(|| value[..CLAIM_BYTES].try_into().ok())
                .flatten()
                .map(u64::from_le_bytes);
            let Some(world) = world else {
                return Err(self.name_clash(format!(
                    "rank {rank} sent {} bytes where a rank of a communicator sends {} when \
                     it joins",
                    value.len(),
                    CLAIM_BYTES + 1
                )));
            };
            if world != self.world_size as u64 {
                return Err(self.mismatch(format!(
                    "rank {rank} joined with a world of {world} rank(s), this rank with {} \
                     (or a communicator of another world uses the same name on the store)",
                    self.world_size
                )));
            }
        }
        if let Some(rank) = all.iter().position(|v| v[CLAIM_BYTES] != 0) {
            let what = match self.store.get(&self.clash_key())? {
                Some(found) => String::from_utf8_lossy(&found).into_owned(),
                None => "a rank found its place taken".to_owned(),
            };
            return Err(self.name_clash(format!(
                "rank {rank} saw that another rank claimed a place in this name while the \
                 ranks joined ({what}); no rank keeps a communicator that may mix the two"
            )));
        }
        Ok(())
    }

    fn name_clash(&self, reason: String) -> GraphError {
        GraphError::CommNameClash {
            communicator: self.name.clone(),
            rank: self.rank,
            reason,
        }
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
        match self
            .store
            .wait(&key, deadline_after(started, self.timeout))?
        {
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
    fn worlds_too_large_and_ranks_outside_are_refused() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        for (rank, world) in [
            (0, usize::MAX),
            (0, 1 << 40),
            (0, MAX_WORLD_SIZE + 1),
            (usize::MAX, 4),
            (2, 2),
            (0, 0),
        ] {
            match ControlPlane::new(store.clone(), "t", rank, world, Duration::MAX) {
                Err(GraphError::ArgumentMismatch(message)) => {
                    assert!(message.contains(&world.to_string()), "{message}")
                }
                other => panic!("rank {rank} of {world}: {other:?}"),
            }
        }
        let last = MAX_WORLD_SIZE - 1;
        assert!(ControlPlane::new(store, "t", last, MAX_WORLD_SIZE, Duration::MAX).is_ok());
    }

    #[test]
    fn meetings_without_a_time_limit_do_not_overflow() {
        let (_, planes) = planes(2, Duration::MAX);
        for result in on_each(&planes, |p| p.join().and_then(|()| p.barrier("b"))) {
            result.unwrap();
        }
        let id = CommId::from_bytes(&[5; 128]).unwrap();
        for got in on_each(&planes, |p| p.share_id(|| Ok(id.clone()))) {
            assert_eq!(got.unwrap(), id);
        }
    }

    fn is_clash(result: &Result<()>) -> bool {
        matches!(result, Err(GraphError::CommNameClash { .. }))
    }

    /// A rank whose place is taken fails at once; a rank that meets the holder of the place
    /// after seeing the mark fails with the holder, at the same meeting.
    #[test]
    fn a_place_claimed_twice_fails_the_claimant_and_every_rank_that_sees_it() {
        let store = Arc::new(MemoryStore::new());
        let plane = |rank| ControlPlane::new(store.clone(), "t", rank, 2, Duration::from_secs(10));
        let (first, holder, second) = (plane(0).unwrap(), plane(1).unwrap(), plane(1).unwrap());
        std::thread::scope(|s| {
            let held = s.spawn(|| holder.join());
            // The holder has claimed place 1 (it now waits for rank 0).
            while store.get("t/rank/1").unwrap().is_none() {
                std::thread::sleep(Duration::from_millis(1));
            }
            let started = Instant::now();
            let refused = second.join();
            assert!(is_clash(&refused), "{refused:?}");
            assert!(started.elapsed() < Duration::from_secs(1));
            assert!(store.get("t/clash").unwrap().is_some());
            let joined = first.join();
            assert!(is_clash(&joined), "{joined:?}");
            let held = held.join().unwrap();
            assert!(is_clash(&held), "{held:?}");
        });
    }

    /// A clash that comes after the ranks met to join fails them all at the confirmation.
    #[test]
    fn a_clash_during_joining_fails_the_confirmation_on_every_rank() {
        let (store, planes) = planes(2, Duration::from_secs(10));
        for result in on_each(&planes, ControlPlane::join) {
            result.unwrap();
        }
        let late = ControlPlane::new(store, "t", 0, 2, Duration::from_secs(10)).unwrap();
        assert!(is_clash(&late.join()));
        for result in on_each(&planes, ControlPlane::confirm_join) {
            assert!(is_clash(&result), "{result:?}");
        }
    }

    #[test]
    fn ranks_of_different_worlds_do_not_join() {
        let store = Arc::new(MemoryStore::new());
        let planes = [
            ControlPlane::new(store.clone(), "t", 0, 2, Duration::from_secs(10)).unwrap(),
            ControlPlane::new(store.clone(), "t", 1, 3, Duration::from_millis(300)).unwrap(),
        ];
        let results = on_each(&planes, ControlPlane::join);
        // Rank 0 finds rank 1's world; rank 1 waits for a rank 2 that never comes.
        assert!(
            matches!(&results[0], Err(GraphError::CollectiveMismatch { message, .. }) if message.contains("world of 3")),
            "{:?}",
            results[0]
        );
        assert!(
            matches!(results[1], Err(GraphError::CommTimeout { .. })),
            "{:?}",
            results[1]
        );
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
