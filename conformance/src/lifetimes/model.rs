//! The reference model: memory by block address, what each graph recorded and keeps alive, and
//! the rules a device must never break when it hands memory out.
//!
//! The model learns *where* the backend put each buffer (its device address) and predicts
//! *what* the memory holds: a block is identified by its address, so buffers that share a
//! block — a pool block reused after its buffer was dropped, which PyTorch's semantics allow
//! inside one pool — share the model's memory too, and a replay that writes a reused block
//! changes the new buffer exactly as on the device. Contents the program never wrote are
//! unknown and never compared.

use std::collections::{HashMap, HashSet};

use accel_graph_api::PortableOp;

use super::action::{BUFFERS, GRAPHS, HANDLES};

/// A model pool: an equality class of pools (a graph's own, or a user handle).
pub(crate) type PoolToken = u32;

/// A buffer as the model sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Buf {
    pub(crate) address: u64,
    pub(crate) len: usize,
    /// `None` for a plain allocation.
    pub(crate) pool: Option<PoolToken>,
}

/// Where a model graph is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Empty,
    Capturing,
    Captured,
}

/// A graph as the model sees it.
#[derive(Debug, Clone)]
pub(crate) struct Graph {
    pub(crate) phase: Phase,
    /// The pool it captures into: set at creation (`Handle`, `Graph`) or made at its first
    /// capture (`Own`: a new private pool per capture).
    pub(crate) requested: Option<PoolToken>,
    /// The pool of the current capture.
    pub(crate) pool: Option<PoolToken>,
    /// The recorded ops, over (address, length).
    pub(crate) ops: Vec<PortableOp<(u64, usize)>>,
    /// Block addresses its ops touch: kept alive while the graph holds its capture.
    pub(crate) touched: HashSet<u64>,
}

impl Graph {
    pub(crate) fn new(requested: Option<PoolToken>) -> Self {
        Graph {
            phase: Phase::Empty,
            requested,
            pool: None,
            ops: Vec::new(),
            touched: HashSet::new(),
        }
    }

    /// Drops what it captured: the graph can capture again.
    pub(crate) fn reset(&mut self) {
        self.phase = Phase::Empty;
        self.pool = None;
        self.ops.clear();
        self.touched.clear();
    }
}

/// The whole model.
#[derive(Debug, Default)]
pub(crate) struct Model {
    /// Contents by block address; `None`: unknown.
    memory: HashMap<u64, Vec<Option<f32>>>,
    /// The pool each block address last belonged to (`None`: plain).
    block_pool: HashMap<u64, Option<PoolToken>>,
    pub(crate) buffers: [Option<Buf>; BUFFERS as usize],
    pub(crate) graphs: [Option<Graph>; GRAPHS as usize],
    pub(crate) handles: [Option<PoolToken>; HANDLES as usize],
    /// The graph slot capturing, if any.
    pub(crate) capturing: Option<usize>,
    next_pool: PoolToken,
}

impl Model {
    /// A new model pool.
    pub(crate) fn new_pool(&mut self) -> PoolToken {
        self.next_pool += 1;
        self.next_pool
    }

    /// Blocks a live graph's captured work uses.
    pub(crate) fn held(&self) -> HashSet<u64> {
        self.graphs
            .iter()
            .flatten()
            .filter(|g| g.phase != Phase::Empty)
            .flat_map(|g| g.touched.iter().copied())
            .collect()
    }

    /// Records that the backend put a new buffer of `len` elements at `address`, from `pool`
    /// (`None`: plain). Returns the rule the device broke, if it broke one.
    pub(crate) fn allocated(
        &mut self,
        slot: usize,
        address: u64,
        len: usize,
        pool: Option<PoolToken>,
    ) -> Result<(), String> {
        if let Some(other) = self.buffers.iter().flatten().find(|b| b.address == address) {
            return Err(format!(
                "the device handed out {address:#x} ({len} elements, pool {pool:?}) while a \
                 live buffer ({} elements, pool {:?}) still uses it",
                other.len, other.pool
            ));
        }
        if self.held().contains(&address) {
            let before = self.block_pool.get(&address).copied().flatten();
            if pool.is_none() || before != pool {
                return Err(format!(
                    "the device handed out {address:#x} (pool {pool:?}) while a live graph's \
                     captured work still uses it (its block belonged to pool {before:?}): a \
                     replay would write into the new buffer"
                ));
            }
        }
        self.block_pool.insert(address, pool);
        let cells = self.memory.entry(address).or_default();
        if cells.len() < len {
            cells.resize(len, None);
        }
        cells[..len].iter_mut().for_each(|c| *c = None);
        self.buffers[slot] = Some(Buf { address, len, pool });
        Ok(())
    }

    /// Runs `op` on the model's memory.
    pub(crate) fn apply(&mut self, op: &PortableOp<(u64, usize)>) {
        let (out, input) = op.operands();
        let input_cells: Option<Vec<Option<f32>>> = input.map(|(address, len)| {
            let cells = self.memory.entry(address).or_default();
            if cells.len() < len {
                cells.resize(len, None);
            }
            cells[..len].to_vec()
        });
        let (address, len) = out;
        let cells = self.memory.entry(address).or_default();
        if cells.len() < len {
            cells.resize(len, None);
        }
        for (i, cell) in cells[..len].iter_mut().enumerate() {
            // An element is known when everything the op reads of it is known.
            let out = if op.reads_output() { *cell } else { Some(0.0) };
            let input = match &input_cells {
                Some(c) => c[i],
                None => Some(0.0),
            };
            *cell = match (out, input) {
                (Some(o), Some(x)) => Some(op.element(o, x)),
                _ => None,
            };
        }
    }

    /// What the model knows of buffer `buf`.
    pub(crate) fn contents(&self, buf: Buf) -> Vec<Option<f32>> {
        let mut cells = self.memory.get(&buf.address).cloned().unwrap_or_default();
        cells.resize(buf.len, None);
        cells.truncate(buf.len);
        cells
    }
}
