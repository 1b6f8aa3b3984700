//! The captured half of the sanitizer: when a capture ends, every two nodes that touch
//! overlapping bytes of a block, one of them writing, must have a path between them in the
//! graph's dependencies.
//!
//! One pass over the nodes in capture order (a topological order). The graph is cut into
//! *chains* — a node continues the chain of a dependency that is still its chain's last node,
//! or starts a new chain — and each node gets a vector clock over the chains: the join of its
//! dependencies' clocks, with its own position set. A node is an ancestor of another exactly
//! when the other's clock reaches the node's position in its chain (a chain is a path). Each
//! block's accesses are then checked against its history as the eager half checks streams'
//! work, chains standing for streams. Clocks are as long as the chains so far: one entry for
//! a graph captured on one stream, a few for a fork/join program.
#![deny(clippy::arithmetic_side_effects)]

use accel_graph_api::{AccessSource, RaceAccess};
use accel_graph_driver::{DriverResult, software::Node};

use super::{
    access::{BlockAccess, accesses},
    clock::Epoch,
    hash::WordMap,
    history::{History, Record},
    report::RaceReport,
};
use crate::{MockDevice, ops::MockCommand};

/// The chain clocks of a graph's nodes, in one flat array (no allocation per node).
struct ChainClocks {
    /// Node `i`'s clock is `ticks[starts[i]..starts[i + 1]]`: a position per chain (0: no
    /// node of that chain is an ancestor), chains numbered in order of appearance.
    ticks: Vec<u32>,
    starts: Vec<usize>,
    /// Each node's chain and its position there (from 1).
    place: Vec<(usize, u32)>,
}

impl ChainClocks {
    fn of<C>(nodes: &[Node<C>]) -> Self {
        let mut c = ChainClocks {
            ticks: Vec::with_capacity(nodes.len()),
            starts: Vec::with_capacity(nodes.len().saturating_add(1)),
            place: Vec::with_capacity(nodes.len()),
        };
        c.starts.push(0);
        // The last node of each chain so far.
        let mut tails: Vec<usize> = Vec::new();
        let mut clock: Vec<u32> = Vec::new();
        for (id, node) in nodes.iter().enumerate() {
            // Recorded graphs only depend on earlier nodes; anything else is no dependency.
            let deps = || node.deps.iter().copied().filter(move |&d| d < id);
            let (chain, position) = match deps().find(|&d| tails[c.place[d].0] == d) {
                Some(d) => {
                    let (chain, position) = c.place[d];
                    (chain, position.saturating_add(1))
                }
                None => {
                    tails.push(id);
                    (tails.len().saturating_sub(1), 1)
                }
            };
            tails[chain] = id;
            clock.clear();
            clock.resize(tails.len(), 0);
            for d in deps() {
                for (t, &dt) in clock.iter_mut().zip(c.clock(d)) {
                    *t = (*t).max(dt);
                }
            }
            clock[chain] = position;
            c.ticks.extend_from_slice(&clock);
            c.starts.push(c.ticks.len());
            c.place.push((chain, position));
        }
        c
    }

    fn clock(&self, node: usize) -> &[u32] {
        &self.ticks[self.starts[node]..self.starts[node.saturating_add(1)]]
    }

    /// The epoch of node `node`'s accesses.
    fn epoch(&self, node: usize) -> Epoch {
        let (chain, position) = self.place[node];
        Epoch {
            generation: 0,
            component: chain as u64,
            tick: u64::from(position),
        }
    }
}

fn access_of(
    nodes: &[Node<MockCommand>],
    node: usize,
    address: u64,
    bytes: std::ops::Range<usize>,
    kind: accel_graph_api::AccessKind,
) -> RaceAccess {
    RaceAccess {
        label: nodes[node].command.label(),
        stream: nodes[node].stream,
        address,
        bytes,
        kind,
        source: AccessSource::Captured { node },
    }
}

/// The first race between two nodes of a captured graph (`nodes` in capture order), if any.
pub(crate) fn first_race(nodes: &[Node<MockCommand>]) -> Option<RaceReport> {
    let clocks = ChainClocks::of(nodes);
    // Each block's history, found through its address once per access.
    let mut index: WordMap<u64, usize> = WordMap::default();
    let mut histories: Vec<(u64, History<usize>)> = Vec::new();
    let mut touched = Vec::new();
    for (id, node) in nodes.iter().enumerate() {
        let own = clocks.clock(id);
        let ordered = |e: &Epoch| {
            usize::try_from(e.component)
                .ok()
                .and_then(|chain| own.get(chain))
                .is_some_and(|&t| u64::from(t) >= e.tick)
        };
        touched.clear();
        for BlockAccess { block, bytes, kind } in accesses(&node.command) {
            let address = block.address();
            let h = *index.entry(address).or_insert_with(|| {
                histories.push((address, History::default()));
                histories.len().saturating_sub(1)
            });
            touched.push((h, bytes, kind));
        }
        // All of a node's accesses are checked before any is recorded: a node does not race
        // with itself.
        for (h, bytes, kind) in &touched {
            let (address, history) = &histories[*h];
            if let Some(r) = history.conflict(bytes, *kind, ordered) {
                return Some(RaceReport {
                    first: access_of(nodes, r.site, *address, r.bytes.clone(), r.kind),
                    second: access_of(nodes, id, *address, bytes.clone(), *kind),
                });
            }
        }
        for (h, bytes, kind) in touched.drain(..) {
            let record = Record {
                epoch: clocks.epoch(id),
                bytes,
                kind,
                site: id,
            };
            histories[h].1.record(record, ordered);
        }
    }
    None
}

impl MockDevice {
    /// Checks the nodes of a capture that just ended.
    pub(crate) fn sanitize_graph(&self, nodes: &[Node<MockCommand>]) -> DriverResult<()> {
        if !self.races.enabled() {
            return Ok(());
        }
        match first_race(nodes) {
            Some(report) => Err(self.race_found(report)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(deps: &[usize]) -> Node<()> {
        Node {
            command: (),
            deps: deps.to_vec(),
            stream: 1,
        }
    }

    #[test]
    fn ancestry_follows_paths_through_every_branch() {
        // 0 → 1 → 3, 0 → 2 → 3, 2 → 4: 1 and 2 are unordered, so are 3 and 4, and 1 and 4.
        let nodes: Vec<_> = [&[][..], &[0], &[0], &[1, 2], &[2]]
            .iter()
            .map(|d| node(d))
            .collect();
        let c = ChainClocks::of(&nodes);
        let reaches = |from: usize, to: usize| {
            let e = c.epoch(from);
            c.clock(to)
                .get(e.component as usize)
                .is_some_and(|&t| u64::from(t) >= e.tick)
        };
        for (from, to) in [(0, 1), (0, 2), (0, 3), (0, 4), (1, 3), (2, 3), (2, 4)] {
            assert!(reaches(from, to), "{from} → {to}");
        }
        for (from, to) in [(1, 2), (2, 1), (3, 4), (4, 3), (1, 4), (4, 1), (3, 0)] {
            assert!(!reaches(from, to), "{from} ↛ {to}");
        }
    }
}
