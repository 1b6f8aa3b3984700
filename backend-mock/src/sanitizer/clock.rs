//! Vector clocks: what a stream, the host or an event knows to have happened before it.
#![deny(clippy::arithmetic_side_effects)]

/// A sparse vector clock: for each component (a stream's number, or a chain of graph nodes)
/// the last tick known to have happened before. Sparse, because a clock only names the
/// components it has heard of — a few streams — whatever their numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct VectorClock {
    /// `(component, tick)`, sorted by component, ticks above 0.
    entries: Vec<(u64, u64)>,
}

impl VectorClock {
    /// The last tick of `component` known (0: none).
    pub(crate) fn get(&self, component: u64) -> u64 {
        match self.entries.binary_search_by_key(&component, |&(c, _)| c) {
            Ok(i) => self.entries[i].1,
            Err(_) => 0,
        }
    }

    /// Knows `component` up to `tick` at least.
    pub(crate) fn raise(&mut self, component: u64, tick: u64) {
        match self.entries.binary_search_by_key(&component, |&(c, _)| c) {
            Ok(i) => self.entries[i].1 = self.entries[i].1.max(tick),
            Err(i) => self.entries.insert(i, (component, tick)),
        }
    }

    /// Knows everything `other` knows too.
    pub(crate) fn join(&mut self, other: &VectorClock) {
        if other.entries.is_empty() {
            return;
        }
        let mut merged = Vec::with_capacity(self.entries.len().max(other.entries.len()));
        let (mut mine, mut theirs) = (self.entries.iter().peekable(), other.entries.iter());
        for &(c, t) in theirs.by_ref() {
            while let Some(&&(m, u)) = mine.peek() {
                if m >= c {
                    break;
                }
                merged.push((m, u));
                mine.next();
            }
            match mine.peek() {
                Some(&&(m, u)) if m == c => {
                    merged.push((c, t.max(u)));
                    mine.next();
                }
                _ => merged.push((c, t)),
            }
        }
        merged.extend(mine);
        self.entries = merged;
    }

    /// Forgets everything.
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }
}

/// When an access happened: tick `tick` of `component`, in `generation` (a device-wide
/// synchronize starts a new generation, ordering everything before it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Epoch {
    pub(crate) generation: u64,
    pub(crate) component: u64,
    pub(crate) tick: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(entries: &[(u64, u64)]) -> VectorClock {
        let mut c = VectorClock::default();
        for &(k, t) in entries {
            c.raise(k, t);
        }
        c
    }

    #[test]
    fn join_takes_the_larger_tick_of_every_component() {
        let mut a = clock(&[(1, 5), (3, 1), (9, 2)]);
        a.join(&clock(&[(0, 7), (3, 4), (5, 1), (9, 1), (12, 3)]));
        assert_eq!(a, clock(&[(0, 7), (1, 5), (3, 4), (5, 1), (9, 2), (12, 3)]));
        assert_eq!((a.get(3), a.get(4)), (4, 0));
        a.clear();
        assert_eq!(a.get(1), 0);
    }
}
