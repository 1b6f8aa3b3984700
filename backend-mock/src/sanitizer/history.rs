//! The access history of one memory block: the accesses a later access must be ordered after,
//! kept small the FastTrack way (an access ordered after an older one on the same bytes makes
//! the older one redundant).

use std::ops::Range;

use accel_graph_api::AccessKind;

use super::clock::Epoch;

/// One access remembered: when, which bytes, how, and `site`, what to report it as.
#[derive(Debug, Clone)]
pub(crate) struct Record<S> {
    pub(crate) epoch: Epoch,
    pub(crate) bytes: Range<usize>,
    pub(crate) kind: AccessKind,
    pub(crate) site: S,
}

/// The accesses of one block that later accesses are checked against.
#[derive(Debug)]
pub(crate) struct History<S> {
    records: Vec<Record<S>>,
}

impl<S> Default for History<S> {
    fn default() -> Self {
        History {
            records: Vec::new(),
        }
    }
}

/// True when `a` and `b` share a byte (an empty range shares none).
fn overlap(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start.max(b.start) < a.end.min(b.end)
}

fn contains(outer: &Range<usize>, inner: &Range<usize>) -> bool {
    outer.start <= inner.start && inner.end <= outer.end
}

impl<S> History<S> {
    /// The first remembered access that conflicts with an access of `kind` to `bytes` (same
    /// bytes, one of the two writes) and is not `ordered` before it.
    pub(crate) fn conflict(
        &self,
        bytes: &Range<usize>,
        kind: AccessKind,
        ordered: impl Fn(&Epoch) -> bool,
    ) -> Option<&Record<S>> {
        self.records
            .iter()
            .find(|r| r.kind.conflicts_with(kind) && overlap(&r.bytes, bytes) && !ordered(&r.epoch))
    }

    /// Remembers `access`, which conflicted with nothing. Older accesses it covers and is
    /// ordered after are forgotten: any later access unordered with such an older one is
    /// unordered with `access` too, so it is still caught — when `access` writes, or when
    /// both only read (a write cannot be forgotten for a read: a later read would not
    /// conflict with the read that replaced it).
    pub(crate) fn record(&mut self, access: Record<S>, ordered: impl Fn(&Epoch) -> bool) {
        let writes = access.kind.writes();
        self.records.retain(|r| {
            !((writes || !r.kind.writes())
                && contains(&access.bytes, &r.bytes)
                && ordered(&r.epoch))
        });
        self.records.push(access);
    }

    /// Number of accesses remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.records.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(component: u64, tick: u64) -> Epoch {
        Epoch {
            generation: 1,
            component,
            tick,
        }
    }

    fn rec(epoch: Epoch, bytes: Range<usize>, kind: AccessKind) -> Record<()> {
        Record {
            epoch,
            bytes,
            kind,
            site: (),
        }
    }

    #[test]
    fn only_unordered_conflicting_overlaps_race() {
        let mut h = History::default();
        let unordered = |_: &Epoch| false;
        h.record(rec(at(1, 1), 0..16, AccessKind::Read), unordered);
        // Two reads never conflict; disjoint bytes never do.
        assert!(h.conflict(&(0..16), AccessKind::Read, unordered).is_none());
        assert!(
            h.conflict(&(16..32), AccessKind::Write, unordered)
                .is_none()
        );
        assert!(h.conflict(&(8..12), AccessKind::Write, unordered).is_some());
        assert!(h.conflict(&(8..12), AccessKind::Write, |_| true).is_none());
        // An empty range touches nothing.
        assert!(h.conflict(&(4..4), AccessKind::Write, unordered).is_none());
    }

    #[test]
    fn a_covering_ordered_write_replaces_what_came_before() {
        let mut h = History::default();
        let unordered = |_: &Epoch| false;
        h.record(rec(at(1, 1), 0..16, AccessKind::Read), unordered);
        h.record(rec(at(2, 1), 0..16, AccessKind::Read), unordered);
        assert_eq!(h.len(), 2, "concurrent reads are both kept");
        // A read ordered after a write does not replace it.
        h.record(rec(at(1, 2), 0..8, AccessKind::Write), |_| true);
        h.record(rec(at(1, 3), 0..8, AccessKind::Read), |_| true);
        assert_eq!(
            h.len(),
            4,
            "neither replaced a read of bytes it does not cover"
        );
        h.record(rec(at(1, 4), 0..16, AccessKind::ReadWrite), |_| true);
        assert_eq!(h.len(), 1);
    }
}
