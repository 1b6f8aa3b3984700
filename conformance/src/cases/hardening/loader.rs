//! 10.08: a failed first load of a microbatch leaves the static buffer loader as it was.

use accel_graph_api::{Backend, GraphError};
use accel_graph_utils::{Stage, StaticBufferLoader};

use crate::{
    Target,
    check::{CaseResult, Ctx, ensure, expect_all, expect_err},
};

/// Elements of the inputs.
const LEN: usize = 8;

/// Checks how many microbatches `stage` has registered.
fn registered<B: Backend>(
    loader: &StaticBufferLoader<B>,
    stage: Stage,
    expected: usize,
    when: &str,
) -> CaseResult {
    let n = loader.buffers(stage).len();
    ensure!(
        n == expected,
        "{when}: the loader holds {n} microbatch(es) of stage {stage}, expected {expected}"
    );
    Ok(())
}

/// 10.08: the first load of a microbatch whose inputs cannot be loaded (one is a buffer of
/// another instance: `ForeignObject`) registers nothing — the stage keeps the microbatches it
/// had, the static buffers allocated for the failed load are released — and later loads of
/// good inputs work, for microbatch 0 and for a later one. (The loader used to register the
/// new microbatch before copying into it, so a failed first load left buffers behind that the
/// next load reused without copying.)
pub(super) fn failed_first_load<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let other = t.another_instance()?;
    let foreign = other
        .alloc_from(&[9.0; LEN])
        .ctx("alloc_from on the other instance")?;
    let (x, y) = (
        b.alloc_from(&[1.0; LEN]).ctx("alloc_from")?,
        b.alloc_from(&[2.0; LEN]).ctx("alloc_from")?,
    );
    let mut loader = StaticBufferLoader::new(b).ctx("StaticBufferLoader::new")?;
    let before = b.memory_stats();
    let training = Stage::Training;

    expect_err!(
        loader.load(training, 0, &[&x, &foreign]),
        GraphError::ForeignObject { what: "buffer" },
        "first load of microbatch 0 with a foreign input"
    );
    registered(
        &loader,
        training,
        0,
        "after the failed first load of microbatch 0",
    )?;
    registered(&loader, Stage::Validation, 0, "after the failed first load")?;
    let after = b.memory_stats();
    ensure!(
        after == before,
        "the failed first load kept memory: before {before:?}, after {after:?}"
    );

    loader
        .load(training, 0, &[&x, &y])
        .ctx("a good load of microbatch 0")?;
    registered(&loader, training, 1, "after the good load of microbatch 0")?;
    expect_err!(
        loader.load(training, 1, &[&foreign, &y]),
        GraphError::ForeignObject { what: "buffer" },
        "first load of microbatch 1 with a foreign input"
    );
    registered(
        &loader,
        training,
        1,
        "after the failed first load of microbatch 1",
    )?;
    loader
        .load(training, 1, &[&y, &x])
        .ctx("a good load of microbatch 1")?;
    registered(&loader, training, 2, "after the good load of microbatch 1")?;
    let statics = loader.buffers(training);
    for (m, (first, second)) in [(1.0, 2.0), (2.0, 1.0)].into_iter().enumerate() {
        expect_all(
            b,
            &statics[m][0],
            first,
            &format!("microbatch {m}, input 0"),
        )?;
        expect_all(
            b,
            &statics[m][1],
            second,
            &format!("microbatch {m}, input 1"),
        )?;
    }
    Ok(())
}
