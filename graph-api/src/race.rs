//! What a race sanitizer reports: the two accesses of a data race
//! ([`GraphError::DataRace`](crate::GraphError::DataRace)).

use std::{fmt, ops::Range};

/// How a unit of device work touches a range of memory. Every kernel argument declares one:
/// the portable ops write their first operand (`fill` and `copy` overwrite it, the others
/// read it too) and read the second.
///
/// ```
/// use accel_graph_api::AccessKind;
/// assert!(AccessKind::Write.conflicts_with(AccessKind::Read));
/// assert!(AccessKind::ReadWrite.conflicts_with(AccessKind::Read));
/// assert!(!AccessKind::Read.conflicts_with(AccessKind::Read));
/// assert_eq!(AccessKind::Read.combine(AccessKind::Write), AccessKind::ReadWrite);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccessKind {
    /// Reads the bytes.
    Read,
    /// Overwrites the bytes without reading them.
    Write,
    /// Reads the bytes, then writes them (`x += 1`).
    ReadWrite,
}

impl AccessKind {
    /// True when the access changes the bytes.
    pub fn writes(self) -> bool {
        self != AccessKind::Read
    }

    /// Two accesses to the same bytes conflict when at least one of them writes.
    pub fn conflicts_with(self, other: AccessKind) -> bool {
        self.writes() || other.writes()
    }

    /// The access that does what both do.
    pub fn combine(self, other: AccessKind) -> AccessKind {
        if self == other {
            self
        } else {
            AccessKind::ReadWrite
        }
    }
}

impl fmt::Display for AccessKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AccessKind::Read => "read",
            AccessKind::Write => "write",
            AccessKind::ReadWrite => "read-write",
        })
    }
}

/// Where an access of a race report comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccessSource {
    /// Work run outside a graph: a portable op, an upload or a download.
    Eager,
    /// Node `node` of a graph whose capture just ended: the race is between two nodes with no
    /// path between them in the graph's dependencies.
    Captured {
        /// The node's index in the graph (the order of `nodes()`).
        node: usize,
    },
    /// Node `node` of a graph being replayed. A replay is one unit of work on its stream, so
    /// the node stands for the replay: the first node of the graph that accesses the memory
    /// that way.
    Replay {
        /// The node's index in the graph.
        node: usize,
    },
}

/// One side of a data race: which work touched which bytes, how, and on which stream.
///
/// ```
/// use accel_graph_api::{AccessKind, AccessSource, RaceAccess};
/// let access = RaceAccess {
///     label: "fill x=0x7f0000000000[4] value=1".to_owned(),
///     stream: 1,
///     address: 0x7f00_0000_0000,
///     bytes: 0..16,
///     kind: AccessKind::Write,
///     source: AccessSource::Eager,
/// };
/// assert_eq!(access.node(), None);
/// assert_eq!(
///     access.to_string(),
///     "`fill x=0x7f0000000000[4] value=1` (write of bytes 0..16 of the block at \
///      0x7f0000000000, on stream 1)"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RaceAccess {
    /// The work's label, as graph nodes are labelled (`"fill x=0x7f0000000000[4] value=1"`).
    pub label: String,
    /// The stream the work ran on, by its number on the device (for a captured node: the
    /// stream that recorded it).
    pub stream: u64,
    /// Device address of the memory block touched.
    pub address: u64,
    /// The bytes touched, from the start of the block.
    pub bytes: Range<usize>,
    /// Read, write, or both.
    pub kind: AccessKind,
    /// Eager work, a captured node or a replay.
    pub source: AccessSource,
}

impl RaceAccess {
    /// The graph node of a captured or replayed access.
    pub fn node(&self) -> Option<usize> {
        match self.source {
            AccessSource::Eager => None,
            AccessSource::Captured { node } | AccessSource::Replay { node } => Some(node),
        }
    }
}

impl fmt::Display for RaceAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` ({} of bytes {}..{} of the block at {:#x}, on stream {}",
            self.label, self.kind, self.bytes.start, self.bytes.end, self.address, self.stream
        )?;
        match self.source {
            AccessSource::Eager => f.write_str(")"),
            AccessSource::Captured { node } => write!(f, ", graph node {node})"),
            AccessSource::Replay { node } => write!(f, ", in a replay, graph node {node})"),
        }
    }
}
