//! 12.01, 12.03: blocks freed on one branch of a capture and allocated on another.

use accel_graph_api::{AcceleratorGraph, Backend, DeviceBuffer, GraphOptions, Result};

use super::order_after;
use crate::{
    Target,
    check::{CaseResult, Ctx, ensure, expect_all, new_graph, on_stream},
    config::SuiteConfig,
};

/// Adds on the first branch: long enough that a GPU runs the second branch meanwhile.
const ADDS: usize = 50;

/// Elements of the buffers of 12.03 (its point is addresses, not size).
const SMALL: usize = 4096;

/// The program of 12.01, eager or inside a capture on `cap`. `side` forks from `cap`; on
/// `cap`: `t = alloc(n)`, `t = 1`, `t += 1` fifty times, `y = t`, `t` dropped; on `side`:
/// `u = alloc(n)`, `u = 7`, `out = u`, `u` dropped; `side` joins `cap`. Returns the addresses
/// of `t` and `u`. Nothing orders `side`'s allocation after `t`'s last use.
#[allow(clippy::too_many_arguments)]
fn two_branches<B: Backend>(
    b: &B,
    cap: &B::Stream,
    side: &B::Stream,
    (fork, join): (&B::Event, &B::Event),
    y: &B::Buffer<f32>,
    out: &B::Buffer<f32>,
    n: usize,
) -> Result<(u64, u64)> {
    order_after(b, side, cap, fork)?;
    let t_address = {
        let _cap = b.use_stream(cap)?;
        let t = b.alloc(n)?;
        b.fill(&t, 1.0)?;
        for _ in 0..ADDS {
            b.add_scalar(&t, 1.0)?;
        }
        b.copy(y, &t)?;
        t.device_address()
    };
    let u_address = {
        let _side = b.use_stream(side)?;
        let u = b.alloc(n)?;
        b.fill(&u, 7.0)?;
        b.copy(out, &u)?;
        u.device_address()
    };
    order_after(b, cap, side, join)?;
    Ok((t_address, u_address))
}

/// 12.01: the program above, eagerly and captured: `u` must not get `t`'s block (on a GPU the
/// graph's two branches run concurrently, so sharing it corrupts both results), and every
/// replay gives the eager result, y = 51 and out = 7.
pub(super) fn unordered_branches<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let config = SuiteConfig::from_env();
    let n = config.stream_order_elements.max(1);
    let cap = b.new_stream().ctx("new_stream")?;
    let side = b.new_stream().ctx("new_stream")?;
    let (fork, join) = (
        b.new_event().ctx("new_event")?,
        b.new_event().ctx("new_event")?,
    );
    let y = b.alloc_from(&vec![0.0; n]).ctx("alloc y")?;
    let out = b.alloc_from(&vec![0.0; n]).ctx("alloc out")?;
    two_branches(b, &cap, &side, (&fork, &join), &y, &out, n).ctx("the eager run")?;
    expect_all(b, &y, 51.0, "y after the eager run")?;
    expect_all(b, &out, 7.0, "out after the eager run")?;

    let mut g = new_graph(b, GraphOptions::new())?;
    let (t_address, u_address) = b
        .capture_on(&cap, &mut g, || {
            two_branches(b, &cap, &side, (&fork, &join), &y, &out, n)
        })
        .ctx("capture of the two branches")?;
    ensure!(
        t_address != u_address,
        "u, allocated on the side branch, got the block {t_address:#x} that t was freed from on \
         the other branch, which nothing orders it after: the graph's branches share memory"
    );
    for replay in 0..config.repetitions {
        {
            let _cap = on_stream(b, &cap)?;
            b.fill(&y, 0.0).ctx("clear y")?;
            b.fill(&out, 0.0).ctx("clear out")?;
            g.replay().ctx("replay")?;
        }
        expect_all(b, &y, 51.0, &format!("y after replay {replay}"))?;
        expect_all(b, &out, 7.0, &format!("out after replay {replay}"))?;
    }
    println!(
        "    two branches: {n} elements, {} replays equal the eager run, t at {t_address:#x}, \
         u at {u_address:#x}",
        config.repetitions
    );
    Ok(())
}

/// 12.03: in a capture on `a`, `t` is allocated, filled with 3, copied to `y` and dropped on
/// `a`. Ordered: an event recorded on `a` after the drop, waited on by `b_stream`, which then
/// allocates `u` (filled with 5, copied to `out`): `u` may take `t`'s block, and does (the
/// order is known, so the pool need not grow). Unordered: the fork comes before `t` is
/// allocated: `u` gets a block of its own. Both graphs replay the eager values.
pub(super) fn ordered_reuse_only<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let a = b.new_stream().ctx("new_stream")?;
    let side = b.new_stream().ctx("new_stream")?;
    let (fork, join) = (
        b.new_event().ctx("new_event")?,
        b.new_event().ctx("new_event")?,
    );
    let y = b.alloc_from(&[0.0; SMALL]).ctx("alloc y")?;
    let out = b.alloc_from(&[0.0; SMALL]).ctx("alloc out")?;
    for ordered in [true, false] {
        let what = if ordered { "ordered" } else { "unordered" };
        let mut g = new_graph(b, GraphOptions::new())?;
        let (t_address, u_address) = b
            .capture_on(&a, &mut g, || {
                if !ordered {
                    order_after(b, &side, &a, &fork)?;
                }
                let t_address = {
                    let t = b.alloc(SMALL)?;
                    b.fill(&t, 3.0)?;
                    b.copy(&y, &t)?;
                    t.device_address()
                };
                if ordered {
                    // Recorded after the drop: the side stream runs after t's last use.
                    order_after(b, &side, &a, &fork)?;
                }
                let u_address = {
                    let _side = b.use_stream(&side)?;
                    let u = b.alloc(SMALL)?;
                    b.fill(&u, 5.0)?;
                    b.copy(&out, &u)?;
                    u.device_address()
                };
                order_after(b, &a, &side, &join)?;
                Ok((t_address, u_address))
            })
            .ctx(&format!("{what} capture"))?;
        if ordered {
            ensure!(
                u_address == t_address,
                "ordered: the side stream waited on an event recorded after t was freed, so u \
                 may take t's block {t_address:#x} (and the pool need not grow), but got \
                 {u_address:#x}"
            );
        } else {
            ensure!(
                u_address != t_address,
                "unordered: u got t's block {t_address:#x}, though the side stream forked \
                 before t was even allocated"
            );
        }
        {
            let _a = on_stream(b, &a)?;
            b.fill(&y, 0.0).ctx("clear y")?;
            b.fill(&out, 0.0).ctx("clear out")?;
            g.replay().ctx(&format!("{what}: replay"))?;
        }
        expect_all(b, &y, 3.0, &format!("{what}: y after the replay"))?;
        expect_all(b, &out, 5.0, &format!("{what}: out after the replay"))?;
    }
    Ok(())
}

/// 12.06: in a capture on `a`, `s2` forks off and allocates `t`, fills it, and `a` joins `s2`
/// and writes `t` too; `t` is dropped. `s1` then forks from `s2` through an event recorded
/// after the drop, and allocates `u`: `s1` is ordered after `t`'s allocating stream but not
/// after `a`'s write, so `u` must not take `t`'s block (the free point covers every
/// stream seen using the block, not only the one it was allocated on). Replays equal eager.
pub(super) fn every_user_in_the_free_point<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let (a, s1, s2) = (
        b.new_stream().ctx("new_stream")?,
        b.new_stream().ctx("new_stream")?,
        b.new_stream().ctx("new_stream")?,
    );
    let events: Vec<B::Event> = (0..4)
        .map(|_| b.new_event().ctx("new_event"))
        .collect::<Result<_, _>>()?;
    let y = b.alloc_from(&[0.0; SMALL]).ctx("alloc y")?;
    let out = b.alloc_from(&[0.0; SMALL]).ctx("alloc out")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    let (t_address, u_address) = b
        .capture_on(&a, &mut g, || {
            order_after(b, &s2, &a, &events[0])?;
            let t = {
                let _s2 = b.use_stream(&s2)?;
                let t = b.alloc(SMALL)?;
                b.fill(&t, 3.0)?;
                t
            };
            order_after(b, &a, &s2, &events[2])?;
            b.add_scalar(&t, 1.0)?;
            b.copy(&y, &t)?;
            let t_address = t.device_address();
            drop(t);
            // s1 forks from s2 after the drop: ordered after everything s2 did with t, not
            // after a's write.
            order_after(b, &s1, &s2, &events[1])?;
            let u_address = {
                let _s1 = b.use_stream(&s1)?;
                let u = b.alloc(SMALL)?;
                b.fill(&u, 5.0)?;
                b.copy(&out, &u)?;
                u.device_address()
            };
            order_after(b, &a, &s1, &events[3])?;
            Ok((t_address, u_address))
        })
        .ctx("capture")?;
    ensure!(
        u_address != t_address,
        "u on s1 got t's block {t_address:#x}, though s1 is not ordered after a's write of t"
    );
    {
        let _a = on_stream(b, &a)?;
        g.replay().ctx("replay")?;
    }
    expect_all(b, &y, 4.0, "y after the replay")?;
    expect_all(b, &out, 5.0, "out after the replay")?;
    Ok(())
}
