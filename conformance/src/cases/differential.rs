//! §5.2: replaying a captured program gives exactly (bit for bit) what running it eagerly
//! gives, for random programs of portable ops — seeded, so every run checks the same programs.

use accel_graph_api::{AcceleratorGraph, Backend, DeviceBuffer, GraphOptions};
use proptest::{
    collection::vec,
    prelude::*,
    test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner},
};

use crate::{
    SuiteConfig, Target,
    check::{CaseResult, Ctx, ensure, new_graph, on_stream},
};

/// Buffers every program works on.
const BUFFERS: usize = 3;

/// Each program runs twice in a row (eagerly, and as two replays): the second run starts
/// from what the first left, so replays must read memory as it is at replay time.
const RUNS: usize = 2;

/// One portable op over the program's buffers (indices into them).
#[derive(Debug, Clone, Copy)]
enum Op {
    Fill {
        dst: usize,
        value: f32,
    },
    Copy {
        dst: usize,
        src: usize,
    },
    AddScalar {
        x: usize,
        c: f32,
    },
    Scale {
        x: usize,
        a: f32,
    },
    Axpy {
        y: usize,
        a: f32,
        x: usize,
    },
    /// A temporary allocated in the program (inside the capture: from the graph's pool),
    /// filled with `value`, then `dst += a * tmp`.
    Temp {
        dst: usize,
        value: f32,
        a: f32,
    },
}

/// Ops on the main stream, or forked to the side stream and joined back.
#[derive(Debug, Clone)]
enum Segment {
    Main(Vec<Op>),
    Side(Vec<Op>),
}

/// A random program: initial contents of the buffers, then its segments.
#[derive(Debug, Clone)]
struct Program {
    init: Vec<Vec<f32>>,
    segments: Vec<Segment>,
}

impl Program {
    fn len(&self) -> usize {
        self.init[0].len()
    }

    fn side_segments(&self) -> usize {
        self.segments
            .iter()
            .filter(|s| matches!(s, Segment::Side(_)))
            .count()
    }
}

fn value() -> impl Strategy<Value = f32> {
    -8.0f32..8.0
}

fn factor() -> impl Strategy<Value = f32> {
    -2.0f32..2.0
}

fn op() -> impl Strategy<Value = Op> {
    // Copies and axpys never alias their operands (aliasing is not part of the contract).
    prop_oneof![
        (0..BUFFERS, value()).prop_map(|(dst, value)| Op::Fill { dst, value }),
        (0..BUFFERS, 1..BUFFERS).prop_map(|(dst, o)| Op::Copy {
            dst,
            src: (dst + o) % BUFFERS
        }),
        (0..BUFFERS, value()).prop_map(|(x, c)| Op::AddScalar { x, c }),
        (0..BUFFERS, factor()).prop_map(|(x, a)| Op::Scale { x, a }),
        (0..BUFFERS, factor(), 1..BUFFERS).prop_map(|(y, a, o)| Op::Axpy {
            y,
            a,
            x: (y + o) % BUFFERS
        }),
        (0..BUFFERS, value(), factor()).prop_map(|(dst, value, a)| Op::Temp { dst, value, a }),
    ]
}

fn program(multi_stream: bool) -> impl Strategy<Value = Program> {
    (1usize..=48).prop_flat_map(move |len| {
        let segment = if multi_stream {
            prop_oneof![
                vec(op(), 1..6).prop_map(Segment::Main),
                vec(op(), 1..6).prop_map(Segment::Side),
            ]
            .boxed()
        } else {
            vec(op(), 1..12).prop_map(Segment::Main).boxed()
        };
        (vec(vec(value(), len), BUFFERS), vec(segment, 1..5))
            .prop_map(|(init, segments)| Program { init, segments })
    })
}

/// Issues one op on the current stream. Temporaries go to `keep` when given (so that eager
/// work never outlives its memory), else are dropped at once (inside a capture the pool keeps
/// their memory for the graph).
fn apply<B: Backend>(
    b: &B,
    bufs: &[B::Buffer<f32>],
    op: Op,
    keep: Option<&mut Vec<B::Buffer<f32>>>,
) -> accel_graph_api::Result<()> {
    match op {
        Op::Fill { dst, value } => b.fill(&bufs[dst], value),
        Op::Copy { dst, src } => b.copy(&bufs[dst], &bufs[src]),
        Op::AddScalar { x, c } => b.add_scalar(&bufs[x], c),
        Op::Scale { x, a } => b.scale(&bufs[x], a),
        Op::Axpy { y, a, x } => b.axpy(&bufs[y], a, &bufs[x]),
        Op::Temp { dst, value, a } => {
            let tmp = b.alloc(bufs[dst].len())?;
            b.fill(&tmp, value)?;
            b.axpy(&bufs[dst], a, &tmp)?;
            if let Some(keep) = keep {
                keep.push(tmp);
            }
            Ok(())
        }
    }
}

/// Issues the whole program with the main stream current; side segments fork through
/// `events[2i]` and join through `events[2i + 1]`.
fn issue<B: Backend>(
    b: &B,
    bufs: &[B::Buffer<f32>],
    program: &Program,
    side: &B::Stream,
    events: &[B::Event],
    mut keep: Option<&mut Vec<B::Buffer<f32>>>,
) -> accel_graph_api::Result<()> {
    let mut events = events.iter();
    for segment in &program.segments {
        match segment {
            Segment::Main(ops) => {
                for &op in ops {
                    apply(b, bufs, op, keep.as_deref_mut())?;
                }
            }
            Segment::Side(ops) => {
                let (Some(fork), Some(join)) = (events.next(), events.next()) else {
                    unreachable!("two events are made per side segment")
                };
                b.record_event(fork)?;
                {
                    let _side = b.use_stream(side)?;
                    b.wait_event(fork)?;
                    for &op in ops {
                        apply(b, bufs, op, keep.as_deref_mut())?;
                    }
                    b.record_event(join)?;
                }
                b.wait_event(join)?;
            }
        }
    }
    Ok(())
}

struct Setup<B: Backend> {
    bufs: Vec<B::Buffer<f32>>,
    main: B::Stream,
    side: B::Stream,
    events: Vec<B::Event>,
}

fn setup<B: Backend>(b: &B, program: &Program) -> Result<Setup<B>, String> {
    let bufs = program
        .init
        .iter()
        .map(|data| b.alloc_from(data))
        .collect::<Result<Vec<_>, _>>()
        .ctx("alloc_from")?;
    let events = (0..2 * program.side_segments())
        .map(|_| b.new_event())
        .collect::<Result<Vec<_>, _>>()
        .ctx("new_event")?;
    Ok(Setup {
        bufs,
        main: b.new_stream().ctx("new_stream")?,
        side: b.new_stream().ctx("new_stream")?,
        events,
    })
}

fn read_all<B: Backend>(b: &B, bufs: &[B::Buffer<f32>]) -> Result<Vec<Vec<f32>>, String> {
    b.synchronize().ctx("synchronize")?;
    bufs.iter().map(|x| b.download(x).ctx("download")).collect()
}

fn run_eager<B: Backend>(b: &B, program: &Program) -> Result<Vec<Vec<f32>>, String> {
    let s = setup(b, program)?;
    let mut temps = Vec::new();
    {
        let _current = on_stream(b, &s.main)?;
        for _ in 0..RUNS {
            issue(b, &s.bufs, program, &s.side, &s.events, Some(&mut temps)).ctx("eager run")?;
        }
    }
    let out = read_all(b, &s.bufs)?;
    drop(temps);
    Ok(out)
}

fn run_captured<B: Backend>(
    b: &B,
    program: &Program,
    keep_graph: bool,
) -> Result<Vec<Vec<f32>>, String> {
    let s = setup(b, program)?;
    let mut g = new_graph(b, GraphOptions::new().keep_graph(keep_graph))?;
    b.capture_on(&s.main, &mut g, || {
        issue(b, &s.bufs, program, &s.side, &s.events, None)
    })
    .ctx("capture of the program")?;
    let untouched = read_all(b, &s.bufs)?;
    ensure!(
        bits(&untouched) == bits(&program.init),
        "capturing the program changed the buffers (captured work ran)"
    );
    {
        let _current = on_stream(b, &s.main)?;
        for _ in 0..RUNS {
            g.replay().ctx("replay")?;
        }
    }
    read_all(b, &s.bufs)
}

fn bits(data: &[Vec<f32>]) -> Vec<Vec<u32>> {
    data.iter()
        .map(|v| v.iter().map(|x| x.to_bits()).collect())
        .collect()
}

fn first_difference(a: &[Vec<f32>], b: &[Vec<f32>]) -> String {
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        if let Some(j) = (0..x.len()).find(|&j| x[j].to_bits() != y[j].to_bits()) {
            return format!("buffer {i} element {j}: {} vs {}", x[j], y[j]);
        }
    }
    "lengths differ".into()
}

/// A deterministic runner: the same programs on every run and every backend.
fn runner(cases: usize) -> TestRunner {
    let config = Config {
        cases: cases.min(u32::MAX as usize) as u32,
        failure_persistence: None,
        max_shrink_iters: 256,
        ..Config::default()
    };
    TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::XorShift))
}

fn explain<T: std::fmt::Debug>(result: Result<(), TestError<T>>) -> CaseResult {
    match result {
        Ok(()) => Ok(()),
        Err(TestError::Fail(reason, value)) => {
            Err(format!("{reason}\nminimal failing program: {value:?}"))
        }
        Err(TestError::Abort(reason)) => Err(format!("random testing aborted: {reason}")),
    }
}

/// 5.02a (one stream) and 5.02b (`multi_stream`: fork/join segments over two streams): random
/// programs of portable ops, replayed, give exactly what they give eagerly.
pub(crate) fn differential<B: Backend>(t: &Target<B>, multi_stream: bool) -> CaseResult {
    let b = t.backend();
    let n = SuiteConfig::from_env().programs;
    // Alternate keep_graph so both instantiation paths are covered.
    let keep_graph = std::cell::Cell::new(false);
    let result = runner(n).run(&program(multi_stream), |p| {
        keep_graph.set(!keep_graph.get());
        let eager = run_eager(b, &p).map_err(TestCaseError::fail)?;
        let replayed = run_captured(b, &p, keep_graph.get()).map_err(TestCaseError::fail)?;
        if bits(&eager) != bits(&replayed) {
            return Err(TestCaseError::fail(format!(
                "replay differs from eager: {}",
                first_difference(&eager, &replayed)
            )));
        }
        Ok(())
    });
    explain(result)?;
    println!(
        "5.02: {n} random programs, each run twice, replayed == eager \
         (multi_stream: {multi_stream})"
    );
    Ok(())
}

/// The host's f32 arithmetic for a program (products rounded before sums, as specified).
fn host_run(program: &Program) -> Vec<Vec<f32>> {
    let mut bufs = program.init.clone();
    for segment in std::iter::repeat_n(&program.segments, RUNS).flatten() {
        let (Segment::Main(ops) | Segment::Side(ops)) = segment;
        for &op in ops {
            match op {
                Op::Fill { dst, value } => bufs[dst].iter_mut().for_each(|v| *v = value),
                Op::Copy { dst, src } => bufs[dst] = bufs[src].clone(),
                Op::AddScalar { x, c } => bufs[x].iter_mut().for_each(|v| *v += c),
                Op::Scale { x, a } => bufs[x].iter_mut().for_each(|v| *v *= a),
                Op::Axpy { y, a, x } => {
                    let xs = bufs[x].clone();
                    for (v, xv) in bufs[y].iter_mut().zip(xs) {
                        let product = a * xv;
                        *v += product;
                    }
                }
                Op::Temp { dst, value, a } => {
                    let product = a * value;
                    bufs[dst].iter_mut().for_each(|v| *v += product);
                }
            }
        }
    }
    bufs
}

/// 5.02c: eager portable ops compute exactly what the host's f32 arithmetic computes.
pub(crate) fn eager_matches_host<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let n = SuiteConfig::from_env().programs.min(200);
    let result = runner(n).run(&program(false), |p| {
        let device = run_eager(b, &p).map_err(TestCaseError::fail)?;
        let host = host_run(&p);
        if bits(&device) != bits(&host) {
            return Err(TestCaseError::fail(format!(
                "device result differs from host f32 arithmetic (program length {}): {}",
                p.len(),
                first_difference(&device, &host)
            )));
        }
        Ok(())
    });
    explain(result)
}
