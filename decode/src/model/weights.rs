//! The model's tensors: which there are, their shapes, their deterministic random values, and
//! [`Weights`], the set of them over any storage (host vectors for the reference, device
//! buffers for the model).

use std::convert::Infallible;

use crate::{Config, DecodeElement, init::SplitMix64};

/// One tensor of the model. Matrices are stored row-major as PyTorch's `nn.Linear` keeps them,
/// `[out_features, in_features]` (a product is `x · Wᵀ`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tensor {
    /// The token embedding, `[vocab, hidden]`.
    Embed,
    /// The final RMSNorm's weight, `[hidden]`.
    FinalNorm,
    /// The LM head, `[vocab, hidden]` (not tied to the embedding).
    LmHead,
    /// Layer `l`'s RMSNorm before attention, `[hidden]`.
    AttnNorm(usize),
    /// Layer `l`'s fused query/key/value projection, `[q_dim + 2·kv_dim, hidden]`: the query
    /// rows, then the key rows, then the value rows (heads in order in each).
    Qkv(usize),
    /// Layer `l`'s attention output projection, `[hidden, q_dim]`.
    Out(usize),
    /// Layer `l`'s RMSNorm before the MLP, `[hidden]`.
    MlpNorm(usize),
    /// Layer `l`'s fused gate/up projection, `[2·intermediate, hidden]`: the gate rows, then
    /// the up rows.
    GateUp(usize),
    /// Layer `l`'s down projection, `[hidden, intermediate]`.
    Down(usize),
}

impl Tensor {
    /// Every tensor of `config`, in a fixed order.
    pub fn all(config: &Config) -> Vec<Tensor> {
        let mut all = vec![Tensor::Embed, Tensor::FinalNorm, Tensor::LmHead];
        for l in 0..config.layers {
            all.extend([
                Tensor::AttnNorm(l),
                Tensor::Qkv(l),
                Tensor::Out(l),
                Tensor::MlpNorm(l),
                Tensor::GateUp(l),
                Tensor::Down(l),
            ]);
        }
        all
    }

    /// `[rows, columns]` (a vector is one row).
    pub fn shape(&self, c: &Config) -> [usize; 2] {
        match self {
            Tensor::Embed | Tensor::LmHead => [c.vocab, c.hidden],
            Tensor::FinalNorm | Tensor::AttnNorm(_) | Tensor::MlpNorm(_) => [1, c.hidden],
            Tensor::Qkv(_) => [c.qkv_dim(), c.hidden],
            Tensor::Out(_) => [c.hidden, c.q_dim()],
            Tensor::GateUp(_) => [2 * c.intermediate, c.hidden],
            Tensor::Down(_) => [c.hidden, c.intermediate],
        }
    }

    /// Its name in a weight dump ([`crate::dump`]): `embed`, `final_norm`, `lm_head`, and
    /// `layers.{l}.attn_norm`, `.qkv`, `.out`, `.mlp_norm`, `.gate_up`, `.down`.
    ///
    /// ```
    /// use accel_graph_decode::model::Tensor;
    /// assert_eq!(Tensor::GateUp(3).name(), "layers.3.gate_up");
    /// assert_eq!(Tensor::LmHead.name(), "lm_head");
    /// ```
    pub fn name(&self) -> String {
        match self {
            Tensor::Embed => "embed".to_owned(),
            Tensor::FinalNorm => "final_norm".to_owned(),
            Tensor::LmHead => "lm_head".to_owned(),
            Tensor::AttnNorm(l) => format!("layers.{l}.attn_norm"),
            Tensor::Qkv(l) => format!("layers.{l}.qkv"),
            Tensor::Out(l) => format!("layers.{l}.out"),
            Tensor::MlpNorm(l) => format!("layers.{l}.mlp_norm"),
            Tensor::GateUp(l) => format!("layers.{l}.gate_up"),
            Tensor::Down(l) => format!("layers.{l}.down"),
        }
    }

    /// Whether it is a vector (a norm's weight, `[hidden]`) rather than a matrix.
    pub fn is_vector(&self) -> bool {
        matches!(
            self,
            Tensor::FinalNorm | Tensor::AttnNorm(_) | Tensor::MlpNorm(_)
        )
    }

    /// Elements.
    pub fn len(&self, c: &Config) -> usize {
        let [r, k] = self.shape(c);
        r * k
    }

    /// The random stream of this tensor (distinct for every tensor).
    fn stream(&self) -> u64 {
        let (kind, layer) = match *self {
            Tensor::Embed => (0, 0),
            Tensor::FinalNorm => (1, 0),
            Tensor::LmHead => (2, 0),
            Tensor::AttnNorm(l) => (3, l),
            Tensor::Qkv(l) => (4, l),
            Tensor::Out(l) => (5, l),
            Tensor::MlpNorm(l) => (6, l),
            Tensor::GateUp(l) => (7, l),
            Tensor::Down(l) => (8, l),
        };
        (layer as u64) << 8 | kind
    }

    /// Deterministic random values of this tensor for `seed`, scaled so activations stay of
    /// order one through any number of layers: the embedding uniform in `[-1, 1)`, norm weights
    /// `1 + 0.1·u`, projections uniform in `±1/√in_features` (PyTorch's `nn.Linear`
    /// initialisation).
    ///
    /// ```
    /// use accel_graph_decode::{Config, model::Tensor};
    /// let c = Config::tiny();
    /// let w: Vec<f32> = Tensor::Qkv(1).random(&c, 9);
    /// assert_eq!(w.len(), c.qkv_dim() * c.hidden);
    /// assert!(w.iter().all(|v| v.abs() <= 1.0 / (c.hidden as f32).sqrt()));
    /// assert_eq!(w, Tensor::Qkv(1).random::<f32>(&c, 9));
    /// ```
    pub fn random<T: DecodeElement>(&self, c: &Config, seed: u64) -> Vec<T> {
        let start = SplitMix64::stream(seed, self.stream());
        let [_, cols] = self.shape(c);
        let (scale, offset) = match self {
            Tensor::Embed => (1.0, 0.0),
            Tensor::FinalNorm | Tensor::AttnNorm(_) | Tensor::MlpNorm(_) => (0.1, 1.0),
            _ => (1.0 / (cols as f32).sqrt(), 0.0),
        };
        let n = self.len(c);
        let mut out = vec![T::from_f32(0.0); n];
        // Large tensors in parallel parts (the stream skips ahead to each part's start), so
        // a billion-parameter model is generated in seconds; the values do not depend on it.
        const MIN_PART: usize = 1 << 20;
        let threads = std::thread::available_parallelism()
            .map_or(1, |t| t.get())
            .min(n.div_ceil(MIN_PART))
            .max(1);
        let per = n.div_ceil(threads).max(1);
        std::thread::scope(|scope| {
            for (i, part) in out.chunks_mut(per).enumerate() {
                let mut g = start.clone();
                g.skip((i * per) as u64);
                let fill = move || {
                    for v in part {
                        *v = T::from_f32(g.uniform() * scale + offset);
                    }
                };
                if threads == 1 {
                    fill();
                } else {
                    scope.spawn(fill);
                }
            }
        });
        out
    }
}

/// One decoder layer's tensors in storage `W`.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerWeights<W> {
    /// [`Tensor::AttnNorm`].
    pub attn_norm: W,
    /// [`Tensor::Qkv`].
    pub qkv: W,
    /// [`Tensor::Out`].
    pub out: W,
    /// [`Tensor::MlpNorm`].
    pub mlp_norm: W,
    /// [`Tensor::GateUp`].
    pub gate_up: W,
    /// [`Tensor::Down`].
    pub down: W,
}

/// Every tensor of a model in storage `W`: `Vec<T>` on the host ([`HostWeights`]), a device
/// buffer in a [`Model`](super::Model).
#[derive(Debug, Clone, PartialEq)]
pub struct Weights<W> {
    /// [`Tensor::Embed`].
    pub embed: W,
    /// [`Tensor::FinalNorm`].
    pub final_norm: W,
    /// [`Tensor::LmHead`].
    pub lm_head: W,
    /// The layers, in order.
    pub layers: Vec<LayerWeights<W>>,
}

/// Weights on the host.
pub type HostWeights<T> = Weights<Vec<T>>;

impl<W> Weights<W> {
    /// Builds every tensor of `config` with `make`, in [`Tensor::all`]'s order, stopping at
    /// the first error.
    pub fn try_build<E>(
        config: &Config,
        mut make: impl FnMut(Tensor) -> Result<W, E>,
    ) -> Result<Self, E> {
        let embed = make(Tensor::Embed)?;
        let final_norm = make(Tensor::FinalNorm)?;
        let lm_head = make(Tensor::LmHead)?;
        let layers = (0..config.layers)
            .map(|l| {
                Ok(LayerWeights {
                    attn_norm: make(Tensor::AttnNorm(l))?,
                    qkv: make(Tensor::Qkv(l))?,
                    out: make(Tensor::Out(l))?,
                    mlp_norm: make(Tensor::MlpNorm(l))?,
                    gate_up: make(Tensor::GateUp(l))?,
                    down: make(Tensor::Down(l))?,
                })
            })
            .collect::<Result<_, E>>()?;
        Ok(Weights {
            embed,
            final_norm,
            lm_head,
            layers,
        })
    }

    /// The storage of `tensor` (`None` for a layer past the last).
    pub fn get(&self, tensor: Tensor) -> Option<&W> {
        let layer = |l: usize| self.layers.get(l);
        match tensor {
            Tensor::Embed => Some(&self.embed),
            Tensor::FinalNorm => Some(&self.final_norm),
            Tensor::LmHead => Some(&self.lm_head),
            Tensor::AttnNorm(l) => layer(l).map(|w| &w.attn_norm),
            Tensor::Qkv(l) => layer(l).map(|w| &w.qkv),
            Tensor::Out(l) => layer(l).map(|w| &w.out),
            Tensor::MlpNorm(l) => layer(l).map(|w| &w.mlp_norm),
            Tensor::GateUp(l) => layer(l).map(|w| &w.gate_up),
            Tensor::Down(l) => layer(l).map(|w| &w.down),
        }
    }
}

impl<T: DecodeElement> HostWeights<T> {
    /// Every tensor's [`Tensor::random`] values for `seed`.
    pub fn random(config: &Config, seed: u64) -> Self {
        let Ok(weights) = Self::try_build::<Infallible>(config, |t| Ok(t.random(config, seed)));
        weights
    }
}
