//! The per-step inputs: what the host uploads before each decode step, into one `u32` device
//! buffer the kernels read, so that one captured graph serves every step.
//!
//! For a step of `rows` rows (a bucket) the buffer holds four arrays of `rows` elements each:
//! token ids, positions, sequence lengths (attended positions, `position + 1`; 0 marks a
//! padding row, which writes nothing into the cache) and key/value cache slots.

/// One sequence's row in a decode step: feed `token` at `position` of the sequence that lives
/// in key/value cache slot `slot`. Its keys and values are written at `position` of the slot,
/// and it attends to positions `0..=position` of the slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StepRow {
    /// The key/value cache slot of the sequence (`0..max_batch`).
    pub slot: u32,
    /// The token id fed (`0..vocab`).
    pub token: u32,
    /// Its position in the sequence (`0..max_len`).
    pub position: u32,
}

impl StepRow {
    /// A row: `token` at `position` of the sequence in `slot`.
    pub fn new(slot: u32, token: u32, position: u32) -> Self {
        StepRow {
            slot,
            token,
            position,
        }
    }
}

/// Arrays of the per-step buffer.
pub const FIELDS: usize = 4;
/// Index of the token ids' array.
pub const TOKENS: usize = 0;
/// Index of the positions' array.
pub const POSITIONS: usize = 1;
/// Index of the sequence lengths' array (0: a padding row).
pub const LENS: usize = 2;
/// Index of the cache slots' array.
pub const SLOTS: usize = 3;

/// The per-step buffer for `rows` padded with padding rows (token 0, position 0, length 0,
/// slot 0) up to `bucket` rows (`rows.len() <= bucket`, checked by the caller).
///
/// ```
/// use accel_graph_decode::model::{StepRow, inputs::pack};
/// let packed = pack(&[StepRow::new(3, 17, 5)], 2);
/// assert_eq!(packed, vec![17, 0, /* positions */ 5, 0, /* lengths */ 6, 0, /* slots */ 3, 0]);
/// ```
pub fn pack(rows: &[StepRow], bucket: usize) -> Vec<u32> {
    let mut out = vec![0u32; FIELDS * bucket];
    for (r, row) in rows.iter().enumerate().take(bucket) {
        out[TOKENS * bucket + r] = row.token;
        out[POSITIONS * bucket + r] = row.position;
        out[LENS * bucket + r] = row.position.saturating_add(1);
        out[SLOTS * bucket + r] = row.slot;
    }
    out
}

/// Reads field `field` of row `r` of a per-step buffer of `rows` rows.
#[inline]
pub fn field(meta: &[u32], rows: usize, field: usize, r: usize) -> u32 {
    meta[field * rows + r]
}
