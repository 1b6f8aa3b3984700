//! What a step takes and gives: [`StepOutput`], [`StepMode`], and the checks of a step's rows
//! against the engine's sizes and its sequences' history.

use std::collections::HashSet;

use accel_graph::{GraphError, Result};

use crate::{Config, model::StepRow};

/// How a step ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepMode {
    /// The bucket's graph was replayed.
    Replayed,
    /// Issued eagerly: graphs off, or the bucket's capture failed.
    Eager,
}

/// The result of [`Engine::step`](super::Engine::step).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepOutput {
    /// The greedy next token of each row, in the order of the rows.
    pub tokens: Vec<u32>,
    /// The bucket the step ran in (rows padded up to it).
    pub bucket: usize,
    /// Replayed or eager.
    pub mode: StepMode,
}

/// Checks `rows` for a step: at least one, at most `largest` (the largest bucket), each slot
/// below `slots` and used once, each token in the vocabulary, each position below `max_len`
/// and at most the slot's written length `filled[slot]` (a step never attends to a position
/// its sequence did not write). Every failure is [`GraphError::ArgumentMismatch`].
pub(crate) fn check_rows(
    rows: &[StepRow],
    largest: usize,
    config: &Config,
    filled: &[u32],
) -> Result<()> {
    let refuse = |msg: String| Err(GraphError::ArgumentMismatch(format!("decode step: {msg}")));
    if rows.is_empty() {
        return refuse("no rows".to_owned());
    }
    if rows.len() > largest {
        return refuse(format!(
            "{} rows exceed the largest bucket ({largest}); split the batch or add a bucket",
            rows.len()
        ));
    }
    let mut seen = HashSet::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        let Some(&written) = filled.get(row.slot as usize) else {
            return refuse(format!(
                "row {i}: slot {} is past the cache's {} slots",
                row.slot,
                filled.len()
            ));
        };
        if !seen.insert(row.slot) {
            return refuse(format!(
                "row {i}: slot {} appears twice in one step",
                row.slot
            ));
        }
        if row.token as usize >= config.vocab {
            return refuse(format!(
                "row {i}: token {} is past the vocabulary of {}",
                row.token, config.vocab
            ));
        }
        if row.position as usize >= config.max_len {
            return refuse(format!(
                "row {i}: position {} is past the cache's {} positions (max_len)",
                row.position, config.max_len
            ));
        }
        if row.position > written {
            return refuse(format!(
                "row {i}: position {} of slot {} skips positions {written}..{}, which the \
                 sequence never wrote (feed its tokens in order from position 0)",
                row.position, row.slot, row.position
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_checked() {
        let c = Config::tiny();
        let filled = [3, 0];
        let ok = [StepRow::new(0, 1, 3), StepRow::new(1, 255, 0)];
        check_rows(&ok, 2, &c, &filled).unwrap();
        let bad: [&[StepRow]; 7] = [
            &[],
            &[
                StepRow::new(0, 1, 0),
                StepRow::new(1, 1, 0),
                StepRow::new(0, 1, 0),
            ],
            &[StepRow::new(2, 1, 0)],
            &[StepRow::new(0, 1, 0), StepRow::new(0, 1, 1)],
            &[StepRow::new(0, 256, 0)],
            &[StepRow::new(0, 1, 64)],
            &[StepRow::new(1, 1, 1)],
        ];
        for rows in bad {
            let largest = if rows.len() == 3 { 2 } else { 4 };
            assert!(
                matches!(
                    check_rows(rows, largest, &c, &filled),
                    Err(GraphError::ArgumentMismatch(_))
                ),
                "{rows:?}"
            );
        }
    }
}
