//! Runs a program on a backend and on the model side by side, step by step.

use accel_graph_api::{
    AcceleratorGraph, Backend, DeviceBuffer, GraphOptions, PoolId, PortableOp, Result as ApiResult,
    View,
};

use super::{
    Contract,
    action::{Action, PoolChoice},
    model::{Buf, Graph, Model, Phase},
};

/// How a program failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FailureKind {
    /// A buffer held other values than the model predicts.
    WrongValue,
    /// The backend refused an action that is legal under the contract.
    Refused,
    /// The backend handed out memory it must not (see [`Model::allocated`]).
    Aliasing,
    /// Memory was not back to where it started once everything was dropped.
    Leak,
}

/// A failed program: what, at which step, and the details.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub(crate) kind: FailureKind,
    pub(crate) step: usize,
    pub(crate) message: String,
}

/// What a program did (for the summary).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Tally {
    /// Actions run (the others were illegal at their point and skipped).
    pub(crate) run: usize,
    /// Replays.
    pub(crate) replays: usize,
    /// Elements compared with the model.
    pub(crate) compared: usize,
}

/// The backend side of a program: its objects, slot for slot with the model's.
struct Device<B: Backend> {
    buffers: Vec<Option<B::Buffer<f32>>>,
    graphs: Vec<Option<B::Graph>>,
    handles: Vec<Option<PoolId>>,
}

/// Runs `program` under `contract` on `backend` (its current stream must be `stream`, a
/// stream that can be captured). Returns what it did, or the first failure.
pub(crate) fn run<B: Backend>(
    backend: &B,
    stream: &B::Stream,
    contract: Contract,
    program: &[Action],
) -> Result<Tally, Failure> {
    let baseline = backend.memory_stats();
    let mut device = Device::<B> {
        buffers: (0..super::action::BUFFERS).map(|_| None).collect(),
        graphs: (0..super::action::GRAPHS).map(|_| None).collect(),
        handles: vec![None; usize::from(super::action::HANDLES)],
    };
    let mut model = Model::default();
    let mut tally = Tally::default();
    let outcome = (|| {
        let _current = backend.use_stream(stream).map_err(|e| Failure {
            kind: FailureKind::Refused,
            step: 0,
            message: format!("use_stream: {e}"),
        })?;
        for (step, action) in program.iter().enumerate() {
            let ran = step_once(
                backend,
                contract,
                &mut device,
                &mut model,
                *action,
                &mut tally,
            )
            .map_err(|(kind, message)| Failure {
                kind,
                step,
                message: format!("{action:?}: {message}"),
            })?;
            tally.run += usize::from(ran);
        }
        // The end: a capture still open is aborted, then every live buffer is compared.
        if let Some(g) = model.capturing.take() {
            if let Some(dg) = device.graphs[g].as_mut() {
                dg.reset();
            }
            if let Some(mg) = model.graphs[g].as_mut() {
                mg.reset();
            }
        }
        for s in 0..device.buffers.len() {
            if let (Some(buf), Some(db)) = (model.buffers[s], device.buffers[s].as_ref()) {
                let got = backend.download(db).map_err(|e| Failure {
                    kind: FailureKind::Refused,
                    step: program.len(),
                    message: format!("final download failed: {e}"),
                })?;
                compare(&model, buf, &got, &mut tally).map_err(|(kind, message)| Failure {
                    kind,
                    step: program.len(),
                    message: format!("final comparison: {message}"),
                })?;
            }
        }
        Ok(())
    })();
    // Whatever happened, everything goes: graphs first (a capture left open is aborted), then
    // buffers; then memory must be back where it started.
    drop(device.graphs);
    drop(device.buffers);
    outcome?;
    let after = backend.memory_stats();
    if after != baseline {
        return Err(Failure {
            kind: FailureKind::Leak,
            step: program.len(),
            message: format!("memory before {baseline:?}, after everything was dropped {after:?}"),
        });
    }
    Ok(tally)
}

type StepResult = Result<bool, (FailureKind, String)>;

fn refused<T>(what: &str, r: ApiResult<T>) -> Result<T, (FailureKind, String)> {
    r.map_err(|e| (FailureKind::Refused, format!("{what} failed: {e}")))
}

/// The `k`-th of `candidates` (modulo their number), if there is any.
fn pick(candidates: impl IntoIterator<Item = usize>, k: u8) -> Option<usize> {
    let all: Vec<usize> = candidates.into_iter().collect();
    (!all.is_empty()).then(|| all[usize::from(k) % all.len()])
}

fn live(model: &Model) -> impl Iterator<Item = usize> + '_ {
    (0..model.buffers.len()).filter(|&i| model.buffers[i].is_some())
}

fn graphs_in(model: &Model, phase: Option<Phase>) -> Vec<usize> {
    (0..model.graphs.len())
        .filter(|&i| {
            model.graphs[i]
                .as_ref()
                .is_some_and(|g| phase.is_none_or(|p| g.phase == p))
        })
        .collect()
}

/// Runs one action if it has a candidate and is legal now; `Ok(false)` when it was skipped.
fn step_once<B: Backend>(
    backend: &B,
    contract: Contract,
    device: &mut Device<B>,
    model: &mut Model,
    action: Action,
    tally: &mut Tally,
) -> StepResult {
    let capturing = model.capturing;
    match action {
        Action::Alloc { slot: k, len } => {
            let vacant = (0..model.buffers.len()).filter(|&i| model.buffers[i].is_none());
            let Some(s) = pick(vacant, k) else {
                return Ok(false);
            };
            let pool = capturing.and_then(|g| model.graphs[g].as_ref().and_then(|g| g.pool));
            let buffer = refused("alloc", backend.alloc(len))?;
            model
                .allocated(s, buffer.device_address(), len, pool)
                .map_err(|m| (FailureKind::Aliasing, m))?;
            device.buffers[s] = Some(buffer);
        }
        Action::Drop { slot: k } => {
            let held = model.held();
            // PyTorch's contract: a plain buffer a live graph uses is never dropped.
            let droppable: Vec<usize> = live(model)
                .filter(|&i| {
                    let b = model.buffers[i].as_ref().map(|b| (b.pool, b.address));
                    contract == Contract::AnyDrop
                        || b.is_some_and(|(pool, address)| {
                            pool.is_some() || !held.contains(&address)
                        })
                })
                .collect();
            let Some(s) = pick(droppable, k) else {
                return Ok(false);
            };
            model.buffers[s] = None;
            device.buffers[s] = None;
        }
        Action::Fill { slot: k, value } => {
            return unary(backend, device, model, k, |x| PortableOp::Fill { x, value });
        }
        Action::AddScalar { slot: k, c } => {
            return unary(backend, device, model, k, |x| PortableOp::AddScalar {
                x,
                c,
            });
        }
        Action::Scale { slot: k, a } => {
            return unary(backend, device, model, k, |x| PortableOp::Scale { x, a });
        }
        Action::Axpy { y, a, x } => {
            return binary(backend, device, model, y, x, |y, x| PortableOp::Axpy {
                y,
                a,
                x,
            });
        }
        Action::Copy { dst, src } => {
            return binary(backend, device, model, dst, src, |dst, src| {
                PortableOp::Copy { dst, src }
            });
        }
        Action::Begin { g: k, fresh, pool } => {
            if capturing.is_some() {
                return Ok(false);
            }
            let reusable = graphs_in(model, Some(Phase::Empty));
            let vacant: Vec<usize> = (0..model.graphs.len())
                .filter(|&i| model.graphs[i].is_none())
                .collect();
            let g = match (fresh || reusable.is_empty(), pick(vacant, k)) {
                (true, Some(g)) => {
                    new_graph(backend, device, model, g, pool)?;
                    g
                }
                _ => match pick(reusable, k) {
                    Some(g) => g,
                    None => return Ok(false),
                },
            };
            let Some(dg) = device.graphs[g].as_mut() else {
                return Ok(false);
            };
            refused("capture_begin", dg.capture_begin())?;
            let fresh_pool = model.new_pool();
            let mg = model.graphs[g]
                .as_mut()
                .ok_or((FailureKind::Refused, "no graph".to_owned()))?;
            mg.phase = Phase::Capturing;
            mg.pool = Some(mg.requested.unwrap_or(fresh_pool));
            model.capturing = Some(g);
        }
        Action::End => {
            let Some(g) = capturing else {
                return Ok(false);
            };
            let dg = device.graphs[g]
                .as_mut()
                .ok_or((FailureKind::Refused, "no graph".to_owned()))?;
            refused("capture_end", dg.capture_end())?;
            if let Some(mg) = model.graphs[g].as_mut() {
                mg.phase = Phase::Captured;
            }
            model.capturing = None;
        }
        Action::Replay { g: k } => {
            if capturing.is_some() {
                return Ok(false);
            }
            let Some(g) = pick(graphs_in(model, Some(Phase::Captured)), k) else {
                return Ok(false);
            };
            let ops = model.graphs[g]
                .as_ref()
                .map(|mg| mg.ops.clone())
                .unwrap_or_default();
            let dg = device.graphs[g]
                .as_mut()
                .ok_or((FailureKind::Refused, "no graph".to_owned()))?;
            refused("replay", dg.replay())?;
            for op in &ops {
                model.apply(op);
            }
            tally.replays += 1;
        }
        Action::Reset { g: k } | Action::DropGraph { g: k } => {
            let Some(g) = pick(graphs_in(model, None), k) else {
                return Ok(false);
            };
            if matches!(action, Action::Reset { .. }) {
                if let Some(dg) = device.graphs[g].as_mut() {
                    dg.reset();
                }
                if let Some(mg) = model.graphs[g].as_mut() {
                    mg.reset();
                }
            } else {
                device.graphs[g] = None;
                model.graphs[g] = None;
            }
            if capturing == Some(g) {
                model.capturing = None;
            }
        }
        Action::NewHandle { p: k } => {
            let vacant = (0..model.handles.len()).filter(|&i| model.handles[i].is_none());
            let Some(p) = pick(vacant, k) else {
                return Ok(false);
            };
            device.handles[p] = Some(backend.graph_pool_handle());
            model.handles[p] = Some(model.new_pool());
        }
        Action::Check { slot: k } => {
            if capturing.is_some() {
                return Ok(false);
            }
            let Some(s) = pick(live(model), k) else {
                return Ok(false);
            };
            let (Some(buf), Some(db)) = (model.buffers[s], device.buffers[s].as_ref()) else {
                return Ok(false);
            };
            let got = refused("download", backend.download(db))?;
            compare(model, buf, &got, tally)?;
        }
        Action::EmptyCache => refused("empty_cache", backend.empty_cache())?,
    }
    Ok(true)
}

/// Makes a new graph in slot `g` with its pool from `pool` (its own pool where the choice
/// has no candidate).
fn new_graph<B: Backend>(
    backend: &B,
    device: &mut Device<B>,
    model: &mut Model,
    g: usize,
    pool: PoolChoice,
) -> Result<(), (FailureKind, String)> {
    let existing_handles: Vec<usize> = (0..model.handles.len())
        .filter(|&i| model.handles[i].is_some())
        .collect();
    let (options, requested) = match pool {
        PoolChoice::Handle(k) => match pick(existing_handles, k) {
            Some(p) => match (device.handles[p], model.handles[p]) {
                (Some(id), Some(token)) => (GraphOptions::new().pool(id), Some(token)),
                _ => (GraphOptions::new(), None),
            },
            None => (GraphOptions::new(), None),
        },
        PoolChoice::Graph(k) => match pick(graphs_in(model, Some(Phase::Captured)), k) {
            Some(other) => {
                let dg = device.graphs[other]
                    .as_ref()
                    .ok_or((FailureKind::Refused, "no graph".to_owned()))?;
                let id = refused("pool()", dg.pool())?;
                let token = model.graphs[other].as_ref().and_then(|mg| mg.pool);
                (GraphOptions::new().pool(id), token)
            }
            None => (GraphOptions::new(), None),
        },
        PoolChoice::Own => (GraphOptions::new(), None),
    };
    device.graphs[g] = Some(refused("graph", backend.graph(options))?);
    model.graphs[g] = Some(Graph::new(requested));
    Ok(())
}

fn compare(
    model: &Model,
    buf: Buf,
    got: &[f32],
    tally: &mut Tally,
) -> Result<(), (FailureKind, String)> {
    let want = model.contents(buf);
    for (i, (w, g)) in want.iter().zip(got).enumerate() {
        if let Some(w) = w {
            tally.compared += 1;
            if w.to_bits() != g.to_bits() {
                return Err((
                    FailureKind::WrongValue,
                    format!(
                        "element {i} of the buffer at {:#x} ({} elements, pool {:?}) is {g}, \
                         the model says {w}",
                        buf.address, buf.len, buf.pool
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Issues a one-buffer op on slot `s` (eagerly, or into the open capture).
fn unary<B: Backend>(
    backend: &B,
    device: &Device<B>,
    model: &mut Model,
    s: u8,
    make: impl Fn((u64, usize)) -> PortableOp<(u64, usize)>,
) -> StepResult {
    let Some(s) = pick(live(model), s) else {
        return Ok(false);
    };
    let (Some(buf), Some(db)) = (model.buffers[s], device.buffers[s].as_ref()) else {
        return Ok(false);
    };
    let model_op = make((buf.address, buf.len));
    let device_op = model_op.map(|_| db);
    refused(model_op.name(), backend.launch(device_op.map(View::from)))?;
    record(model, model_op);
    Ok(true)
}

/// Issues a two-buffer op (equal lengths only).
fn binary<B: Backend>(
    backend: &B,
    device: &Device<B>,
    model: &mut Model,
    out: u8,
    input: u8,
    make: impl Fn((u64, usize), (u64, usize)) -> PortableOp<(u64, usize)>,
) -> StepResult {
    let Some(o) = pick(live(model), out) else {
        return Ok(false);
    };
    let Some(ob) = model.buffers[o] else {
        return Ok(false);
    };
    // The read operand: among the live buffers of the same length (the written one included).
    let same_len: Vec<usize> = live(model)
        .filter(|&i| model.buffers[i].is_some_and(|b| b.len == ob.len))
        .collect();
    let Some(i) = pick(same_len, input) else {
        return Ok(false);
    };
    let Some(ib) = model.buffers[i] else {
        return Ok(false);
    };
    let (Some(od), Some(id)) = (device.buffers[o].as_ref(), device.buffers[i].as_ref()) else {
        return Ok(false);
    };
    let model_op = make((ob.address, ob.len), (ib.address, ib.len));
    let mut which = [od, id].into_iter();
    let device_op = model_op.map(|_| which.next().unwrap_or(od));
    refused(model_op.name(), backend.launch(device_op.map(View::from)))?;
    record(model, model_op);
    Ok(true)
}

/// Runs an op on the model now, or records it into the open capture.
fn record(model: &mut Model, op: PortableOp<(u64, usize)>) {
    match model.capturing.and_then(|g| model.graphs[g].as_mut()) {
        Some(graph) => {
            let (out, input) = op.operands();
            graph.touched.insert(out.0);
            if let Some(input) = input {
                graph.touched.insert(input.0);
            }
            graph.ops.push(op);
        }
        None => model.apply(&op),
    }
}
