//! The host reference against an independent, naive Llama: the whole sequence recomputed at
//! every step in `f64` — no key/value cache, a two-pass softmax, RoPE angles computed in
//! place — so the cache, its slots, RoPE, grouped-query attention and the fused projections
//! are checked against the textbook formulas, not against themselves.

mod common;

use accel_graph_decode::{
    Config,
    model::{HostWeights, Reference, StepRow},
};
use common::{SEED, chunked};

/// `y = W x` for `W` stored `[rows, cols]` row-major.
fn matvec(w: &[f32], x: &[f64], rows: usize) -> Vec<f64> {
    let cols = x.len();
    (0..rows)
        .map(|r| (0..cols).map(|c| f64::from(w[r * cols + c]) * x[c]).sum())
        .collect()
}

fn rmsnorm(x: &[f64], w: &[f32], eps: f32) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let inv = 1.0 / (ms + f64::from(eps)).sqrt();
    x.iter()
        .zip(w)
        .map(|(v, w)| v * inv * f64::from(*w))
        .collect()
}

fn rope(x: &mut [f64], pos: usize, c: &Config) {
    let half = c.head_dim / 2;
    for i in 0..half {
        let angle = pos as f64 * f64::from(c.rope_theta).powf(-2.0 * i as f64 / c.head_dim as f64);
        let (a, b) = (x[i], x[i + half]);
        x[i] = a * angle.cos() - b * angle.sin();
        x[i + half] = b * angle.cos() + a * angle.sin();
    }
}

/// The logits of the last token of `tokens`, recomputing every position.
fn naive_logits(c: &Config, w: &HostWeights<f32>, tokens: &[u32]) -> Vec<f64> {
    let (d, n) = (c.head_dim, tokens.len());
    let mut xs: Vec<Vec<f64>> = tokens
        .iter()
        .map(|&t| {
            w.embed[t as usize * c.hidden..][..c.hidden]
                .iter()
                .map(|&v| f64::from(v))
                .collect()
        })
        .collect();
    for lw in &w.layers {
        let (mut qs, mut ks, mut vs) = (Vec::new(), Vec::new(), Vec::new());
        for (p, x) in xs.iter().enumerate() {
            let qkv = matvec(&lw.qkv, &rmsnorm(x, &lw.attn_norm, c.rms_eps), c.qkv_dim());
            let mut q = qkv[..c.q_dim()].to_vec();
            let mut k = qkv[c.q_dim()..c.q_dim() + c.kv_dim()].to_vec();
            for h in q.chunks_mut(d).chain(k.chunks_mut(d)) {
                rope(h, p, c);
            }
            qs.push(q);
            ks.push(k);
            vs.push(qkv[c.q_dim() + c.kv_dim()..].to_vec());
        }
        for p in 0..n {
            let mut attn = vec![0.0f64; c.q_dim()];
            for h in 0..c.heads {
                let kv = h / (c.heads / c.kv_heads);
                let scores: Vec<f64> = (0..=p)
                    .map(|t| {
                        (0..d)
                            .map(|i| qs[p][h * d + i] * ks[t][kv * d + i])
                            .sum::<f64>()
                            / (d as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                for i in 0..d {
                    attn[h * d + i] = (0..=p).map(|t| e[t] * vs[t][kv * d + i]).sum::<f64>() / sum;
                }
            }
            let o = matvec(&lw.out, &attn, c.hidden);
            for (x, o) in xs[p].iter_mut().zip(o) {
                *x += o;
            }
            let gu = matvec(
                &lw.gate_up,
                &rmsnorm(&xs[p], &lw.mlp_norm, c.rms_eps),
                2 * c.intermediate,
            );
            let act: Vec<f64> = (0..c.intermediate)
                .map(|i| {
                    let g = gu[i];
                    g / (1.0 + (-g).exp()) * gu[c.intermediate + i]
                })
                .collect();
            let down = matvec(&lw.down, &act, c.hidden);
            for (x, o) in xs[p].iter_mut().zip(down) {
                *x += o;
            }
        }
    }
    matvec(
        &w.lm_head,
        &rmsnorm(&xs[n - 1], &w.final_norm, c.rms_eps),
        c.vocab,
    )
}

#[test]
fn the_reference_follows_the_textbook_model_step_after_step() {
    let c = Config::tiny();
    let weights = HostWeights::<f32>::random(&c, SEED);
    // Three sequences in slots 2, 0, 1, fed in a different row order at each step, one of them
    // joining late (continuous batching): the cache slots, not the rows, carry a sequence.
    let slots = [2u32, 0, 1];
    let mut reference = Reference::new(c, weights.clone(), 3);
    let mut histories: Vec<Vec<u32>> = (0..3)
        .map(|s| accel_graph_decode::init::prompt(SEED, s, 1, c.vocab as u32))
        .collect();
    let mut worst = 0.0f64;
    for t in 0..12usize {
        let mut rows: Vec<(usize, StepRow)> = (0..3)
            .filter(|&s| t >= 4 * usize::from(s == 2))
            .map(|s| {
                let pos = if s == 2 { t - 4 } else { t };
                let token = *histories[s].last().expect("a token");
                (s, StepRow::new(slots[s], token, pos as u32))
            })
            .collect();
        let turn = t % rows.len();
        rows.rotate_left(turn);
        let step: Vec<StepRow> = rows.iter().map(|(_, r)| *r).collect();
        let out = reference.step(&step).expect("valid rows");
        for (i, (s, _)) in rows.iter().enumerate() {
            let got = &out.logits[i * c.vocab..][..c.vocab];
            let want = naive_logits(&c, &weights, &histories[*s]);
            let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            for (g, w) in got.iter().zip(&want) {
                worst = worst.max((f64::from(*g) - w).abs() / scale);
            }
            histories[*s].push(out.tokens[i]);
        }
    }
    eprintln!("worst relative difference: {worst:e}");
    assert!(
        worst < 1e-4,
        "the f32 reference is {worst} (relative) from the f64 model"
    );
}

#[test]
fn the_split_attention_follows_the_textbook_model_across_chunks() {
    let c = chunked();
    let weights = HostWeights::<f32>::random(&c, SEED);
    let mut reference = Reference::new(c, weights.clone(), 1);
    let mut history = accel_graph_decode::init::prompt(SEED, 0, 1, c.vocab as u32);
    let mut worst = 0.0f64;
    for t in 0..60u32 {
        let out = reference
            .step(&[StepRow::new(0, *history.last().expect("a token"), t)])
            .expect("valid rows");
        if t % 10 == 9 {
            let want = naive_logits(&c, &weights, &history);
            let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            for (g, w) in out.logits.iter().zip(&want) {
                worst = worst.max((f64::from(*g) - w).abs() / scale);
            }
        }
        history.push(out.tokens[0]);
    }
    eprintln!("worst relative difference: {worst:e}");
    assert!(
        worst < 1e-4,
        "the f32 reference is {worst} (relative) from the f64 model"
    );
}
