//! The cases, one file per point of the design's section 5.

use std::{collections::BTreeMap, sync::Mutex};

use accel_graph_api::Backend;

use crate::Case;

mod capture;
mod capture_modes;
mod debug;
mod differential;
mod lifecycle;
mod misuse;
mod multi_stream;
mod panic_safety;
mod pools;
mod state_machine;

/// Every case of the specification, in a stable order (by point of section 5).
pub(crate) fn all<B: Backend>() -> Vec<Case<B>> {
    let mut cases = Vec::new();
    cases.extend(
        capture::cases::<B>()
            .into_iter()
            .filter(|c| c.name.starts_with("5.01")),
    );
    cases.extend(differential::cases::<B>());
    cases.extend(lifecycle::cases::<B>());
    cases.extend(misuse::cases::<B>());
    cases.extend(capture_modes::cases::<B>());
    cases.extend(multi_stream::cases::<B>());
    cases.extend(pools::cases::<B>());
    cases.extend(
        debug::cases::<B>()
            .into_iter()
            .filter(|c| c.name.starts_with("5.09")),
    );
    cases.extend(panic_safety::cases::<B>());
    cases.extend(
        capture::cases::<B>()
            .into_iter()
            .filter(|c| !c.name.starts_with("5.01")),
    );
    cases.extend(
        debug::cases::<B>()
            .into_iter()
            .filter(|c| !c.name.starts_with("5.09")),
    );
    cases.extend(state_machine::cases::<B>());
    cases.extend(utility_cases::<B>());
    cases
}

/// The checks of the seed utilities (design section 7), as the section "utilities", named
/// `7.NN <check>` in their stable order.
fn utility_cases<B: Backend>() -> Vec<Case<B>> {
    crate::utilities::utility_checks::<B>()
        .into_iter()
        .enumerate()
        .map(|(i, (name, run))| {
            Case::new(
                numbered_name(i + 1, name),
                "utilities",
                crate::case::requirements::none,
                run,
            )
        })
        .collect()
}

/// `7.NN name`, made once per name: case names are `&'static str`, so each distinct one is
/// leaked exactly once (a bounded, small amount).
fn numbered_name(n: usize, name: &'static str) -> &'static str {
    static NAMES: Mutex<BTreeMap<(usize, &'static str), &'static str>> =
        Mutex::new(BTreeMap::new());
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    names
        .entry((n, name))
        .or_insert_with(|| Box::leak(format!("7.{n:02} {name}").into_boxed_str()))
}
