//! The model step written once: on the mock, eager and graphed (through the full-iteration
//! wrapper) equal the host reference bit for bit over many steps; on wgpu (lavapipe in CI)
//! they agree with it within the GEMMs' tolerance, and graphed equals eager bit for bit.
// Monomorphizing the full-iteration wrapper over the wgpu backend proves `Send + Sync`
// through wgpu-core's resource types, deeper than the default limit allows in a debug build.
#![recursion_limit = "256"]

use accel_graph::{
    Backend, Result,
    utils::{FullGraphWrapper, Stage},
};
use accel_graph_examples::mlp::{Mlp, MlpShape, reference};

const LR: f32 = 0.05;
const STEPS: usize = 12;

fn shapes() -> [MlpShape; 2] {
    [
        MlpShape {
            batch: 1,
            input: 24,
            hidden: 40,
            output: 8,
        },
        MlpShape {
            batch: 8,
            input: 64,
            hidden: 128,
            output: 32,
        },
    ]
}

/// Runs `STEPS` steps eagerly and `STEPS` through the full-iteration wrapper (one warmup
/// step, then capture and replays) from the same start; returns (eager losses, eager params,
/// graphed losses, graphed params).
#[allow(clippy::type_complexity)]
fn run<B: Backend>(b: &B, shape: MlpShape) -> Result<(Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>)> {
    let init = Mlp::<B>::initial_params(shape, 7);
    let (x, t) = reference::inputs(shape, 3);
    let (dx, dt) = (b.alloc_from(&x)?, b.alloc_from(&t)?);
    let eager = Mlp::new(b, shape, LR, &init)?;
    let mut eager_losses = Vec::new();
    for _ in 0..STEPS {
        let loss = eager.step(&dx, &dt)?;
        eager_losses.push(b.download(&loss)?[0]);
    }
    let graphed = Mlp::new(b, shape, LR, &init)?;
    let mut wrapper =
        FullGraphWrapper::new(b, |_b: &B, _stage, batches: &[&[&B::Buffer<f32>]]| {
            Ok(vec![graphed.step(batches[0][0], batches[0][1])?])
        })?;
    let mut graphed_losses = Vec::new();
    for _ in 0..STEPS {
        let out = wrapper.run(Stage::Training, &[&[&dx, &dt]])?;
        b.synchronize()?;
        graphed_losses.push(b.download(&out[0])?[0]);
    }
    assert_eq!(wrapper.replays(Stage::Training) as usize, STEPS - 1);
    Ok((
        eager_losses,
        b.download(eager.params())?,
        graphed_losses,
        b.download(graphed.params())?,
    ))
}

/// The host reference over `STEPS` steps.
fn host(shape: MlpShape) -> (Vec<f32>, Vec<f32>) {
    let mut params = reference::initial_params(shape, 7);
    let (x, t) = reference::inputs(shape, 3);
    let losses = (0..STEPS)
        .map(|_| reference::step(shape, LR, &mut params, &x, &t))
        .collect();
    (losses, params)
}

#[test]
fn the_mock_equals_the_host_reference_eager_and_graphed() -> Result<()> {
    for shape in shapes() {
        let b = accel_graph::mock::MockBackend::new();
        let (el, ep, gl, gp) = run(&b, shape)?;
        let (hl, hp) = host(shape);
        assert_eq!(el, hl, "{shape:?}: eager losses");
        assert_eq!(ep, hp, "{shape:?}: eager parameters");
        assert_eq!(gl, hl, "{shape:?}: graphed losses");
        assert_eq!(gp, hp, "{shape:?}: graphed parameters");
        assert!(hl[STEPS - 1] < hl[0], "the loss falls: {hl:?}");
    }
    Ok(())
}

#[test]
fn wgpu_agrees_with_the_host_reference_and_graphed_equals_eager() -> Result<()> {
    let b = match accel_graph::wgpu::WgpuBackend::new(0) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("skipped: no wgpu adapter here ({e})");
            return Ok(());
        }
    };
    for shape in shapes() {
        let (el, ep, gl, gp) = run(&b, shape)?;
        assert_eq!(gl, el, "{shape:?}: graphed losses differ from eager ones");
        assert_eq!(
            gp, ep,
            "{shape:?}: graphed parameters differ from eager ones"
        );
        let (hl, hp) = host(shape);
        let scale = hp.iter().fold(0.0f32, |m, p| m.max(p.abs()));
        let worst = ep
            .iter()
            .zip(&hp)
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            worst <= 1e-4 * scale,
            "{shape:?}: parameters differ from the host's by {worst} (max |p| {scale})"
        );
        for (a, b) in el.iter().zip(&hl) {
            assert!(
                (a - b).abs() <= 1e-4 * b.abs(),
                "{shape:?}: loss {a} vs host {b}"
            );
        }
    }
    Ok(())
}
