//! §7 shared resources: Megatron's shared capture stream and graph pool, one per backend
//! instance.

use accel_graph_api::Backend;
use accel_graph_utils::{
    graph_pool, release_shared_resources, shared_capture_stream, shared_graph_pool,
};

use super::ensure;
use crate::{
    Target,
    check::{CaseResult, Ctx},
};

pub(crate) fn shared_singletons_per_instance<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let s1 = shared_capture_stream(b).ctx("shared stream")?;
    let s2 = shared_capture_stream(&b.clone()).ctx("shared stream of a clone")?;
    ensure(s1 == s2, || {
        "clones of a backend must share the capture stream".into()
    })?;
    ensure(s1 != b.default_stream(), || {
        "the capture stream cannot be the default stream".into()
    })?;
    let from_thread = std::thread::scope(|scope| scope.spawn(|| shared_capture_stream(b)).join());
    let s3 = from_thread
        .map_err(|_| "thread panicked".to_string())?
        .ctx("shared stream from a thread")?;
    ensure(s1 == s3, || {
        "the capture stream is process-wide, not per thread".into()
    })?;
    let p = shared_graph_pool(b);
    ensure(p.is_user() && p == shared_graph_pool(&b.clone()), || {
        "one shared pool per instance".into()
    })?;
    ensure(graph_pool(b, true) == p, || {
        "graph_pool(true) is the shared pool".into()
    })?;
    let (a, c) = (graph_pool(b, false), graph_pool(b, false));
    ensure(a != c && a != p, || {
        "graph_pool(false) is a new pool each call".into()
    })
}

/// 7.19: another instance of the device gets its own shared stream and pool (singletons are
/// per instance, never leaked across instances), and `release_shared_resources` forgets an
/// instance's singletons so the next call makes new ones.
pub(crate) fn shared_singletons_differ_between_instances<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let other = t.another_instance()?;
    let (mine, theirs) = (shared_graph_pool(b), shared_graph_pool(&other));
    ensure(mine != theirs, || {
        format!("two instances share the graph pool {mine}")
    })?;
    let their_stream = shared_capture_stream(&other).ctx("shared stream of the other instance")?;
    ensure(other.is_capturing(&their_stream).is_ok(), || {
        "the other instance's shared stream is not its own".into()
    })?;
    ensure(b.is_capturing(&their_stream).is_err(), || {
        "the primary instance accepts the other instance's shared stream as its own".into()
    })?;
    let my_stream = shared_capture_stream(b).ctx("shared stream")?;
    ensure(release_shared_resources(&other) == 2, || {
        "release_shared_resources must drop the stream and the pool it made".into()
    })?;
    ensure(release_shared_resources(&other) == 0, || {
        "a second release_shared_resources has nothing left to drop".into()
    })?;
    ensure(shared_graph_pool(&other) != theirs, || {
        "after release_shared_resources a new shared pool is made".into()
    })?;
    ensure(
        shared_graph_pool(b) == mine && shared_capture_stream(b).ok() == Some(my_stream),
        || "releasing another instance's singletons changed this instance's".into(),
    )?;
    release_shared_resources(&other);
    Ok(())
}
