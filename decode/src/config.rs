//! The model's sizes: [`Config`] and its presets.

use accel_graph::{GraphError, Result};

/// The sizes of a Llama-architecture decoder.
///
/// ```
/// use accel_graph_decode::Config;
/// let tiny = Config::tiny();
/// assert_eq!((tiny.layers, tiny.hidden, tiny.heads, tiny.kv_heads), (2, 64, 4, 2));
/// assert_eq!(tiny.head_dim, 16);
/// assert_eq!(tiny.num_params(), 106_816);
/// tiny.validate()?;
/// # Ok::<(), accel_graph::GraphError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    /// Tokens in the vocabulary (rows of the embedding and of the LM head).
    pub vocab: usize,
    /// Width of the residual stream.
    pub hidden: usize,
    /// Decoder layers.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (grouped-query attention: `heads / kv_heads` query heads share one).
    pub kv_heads: usize,
    /// Elements per head.
    pub head_dim: usize,
    /// Width of the MLP's hidden layer (of `gate` and of `up` each).
    pub intermediate: usize,
    /// Positions the key/value cache holds per sequence: a sequence's last position is
    /// `max_len - 1`.
    pub max_len: usize,
    /// Base of the rotary embedding's frequencies.
    pub rope_theta: f32,
    /// The epsilon of RMSNorm.
    pub rms_eps: f32,
    /// Positions per chunk of split attention (flash-decoding): a cache longer than this is
    /// attended to in chunks of this many positions, one block each, then merged; a shorter
    /// one in one pass. Not a model size but how it runs: results differ with it in the last
    /// bits (the order of the softmax sums). 64 in the small and medium presets: at batch 1 a
    /// block then takes 64 positions, and a cache of 512 keeps 9 × heads blocks busy (with 256
    /// the step of the medium model took twice as long on an H200, attention being most of it).
    pub attention_chunk: usize,
}

/// The largest head the attention and rotary kernels take.
pub const MAX_HEAD_DIM: usize = 256;

impl Config {
    /// A test model: 2 layers, hidden 64, 4 heads of 16, 2 key/value heads, vocabulary 256,
    /// intermediate 128, 64 positions. 106,816 parameters.
    pub fn tiny() -> Self {
        Config {
            vocab: 256,
            hidden: 64,
            layers: 2,
            heads: 4,
            kv_heads: 2,
            head_dim: 16,
            intermediate: 128,
            max_len: 64,
            rope_theta: 10_000.0,
            rms_eps: 1e-5,
            attention_chunk: 256,
        }
    }

    /// A small Llama: hidden 1024, 24 layers, 16 heads of 64, 8 key/value heads,
    /// intermediate 2816, vocabulary 32,000, 2,048 positions. 348,701,696 parameters
    /// (0.35 B; embedding and LM head not tied, each 32.8 M of them).
    pub fn small_0_5b() -> Self {
        Config {
            vocab: 32_000,
            hidden: 1024,
            layers: 24,
            heads: 16,
            kv_heads: 8,
            head_dim: 64,
            intermediate: 2816,
            max_len: 2048,
            rope_theta: 10_000.0,
            rms_eps: 1e-5,
            attention_chunk: 64,
        }
    }

    /// A medium Llama: hidden 2048, 28 layers, 16 heads of 128, 8 key/value heads,
    /// intermediate 5632, vocabulary 32,000, 2,048 positions. 1,452,394,496 parameters
    /// (1.45 B; embedding and LM head not tied).
    pub fn medium_1_5b() -> Self {
        Config {
            vocab: 32_000,
            hidden: 2048,
            layers: 28,
            heads: 16,
            kv_heads: 8,
            head_dim: 128,
            intermediate: 5632,
            max_len: 2048,
            rope_theta: 10_000.0,
            rms_eps: 1e-5,
            attention_chunk: 64,
        }
    }

    /// The preset named `name`: `tiny`, `small` (or `small_0_5b`), `medium` (or
    /// `medium_1_5b`). Anything else is [`GraphError::ArgumentMismatch`].
    pub fn preset(name: &str) -> Result<Self> {
        match name {
            "tiny" => Ok(Self::tiny()),
            "small" | "small_0_5b" => Ok(Self::small_0_5b()),
            "medium" | "medium_1_5b" => Ok(Self::medium_1_5b()),
            other => Err(GraphError::ArgumentMismatch(format!(
                "unknown model preset {other:?}: expected tiny, small or medium"
            ))),
        }
    }

    /// Elements of the queries of one token: `heads · head_dim`.
    pub fn q_dim(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Elements of the keys (or of the values) of one token: `kv_heads · head_dim`.
    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// Rows of the fused query/key/value projection: `q_dim + 2 · kv_dim`.
    pub fn qkv_dim(&self) -> usize {
        self.q_dim() + 2 * self.kv_dim()
    }

    /// Chunks attention runs in: 1 (one pass) for a cache of at most `attention_chunk`
    /// positions.
    ///
    /// ```
    /// use accel_graph_decode::Config;
    /// assert_eq!(Config::tiny().attention_splits(), 1);
    /// assert_eq!(Config { max_len: 2048, ..Config::tiny() }.attention_splits(), 8);
    /// ```
    pub fn attention_splits(&self) -> usize {
        self.max_len.div_ceil(self.attention_chunk.max(1)).max(1)
    }

    /// Parameters of one decoder layer: two RMSNorm weights, the QKV, output, gate/up and down
    /// projections.
    pub fn params_per_layer(&self) -> usize {
        2 * self.hidden
            + self.qkv_dim() * self.hidden
            + self.hidden * self.q_dim()
            + 2 * self.intermediate * self.hidden
            + self.hidden * self.intermediate
    }

    /// All parameters: embedding, layers, final norm, LM head (not tied to the embedding).
    pub fn num_params(&self) -> usize {
        2 * self.vocab * self.hidden + self.layers * self.params_per_layer() + self.hidden
    }

    /// Checks the sizes: every one at least 1, `heads` a multiple of `kv_heads`, `head_dim`
    /// even and at most [`MAX_HEAD_DIM`], `rope_theta > 1`, `rms_eps > 0`, and every buffer
    /// the kernels index with 32-bit integers addressable so. Anything else is
    /// [`GraphError::ArgumentMismatch`] naming the size.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(GraphError::ArgumentMismatch(format!("model config: {msg}")));
        for (name, v) in [
            ("vocab", self.vocab),
            ("hidden", self.hidden),
            ("layers", self.layers),
            ("heads", self.heads),
            ("kv_heads", self.kv_heads),
            ("head_dim", self.head_dim),
            ("intermediate", self.intermediate),
            ("max_len", self.max_len),
            ("attention_chunk", self.attention_chunk),
        ] {
            if v == 0 {
                return bad(format!("{name} is 0"));
            }
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            return bad(format!(
                "heads ({}) is not a multiple of kv_heads ({})",
                self.heads, self.kv_heads
            ));
        }
        if !self.head_dim.is_multiple_of(2) || self.head_dim > MAX_HEAD_DIM {
            return bad(format!(
                "head_dim {} must be even and at most {MAX_HEAD_DIM}",
                self.head_dim
            ));
        }
        if !(self.rope_theta > 1.0 && self.rope_theta.is_finite()) {
            return bad(format!("rope_theta {} must be above 1", self.rope_theta));
        }
        if !(self.rms_eps > 0.0 && self.rms_eps.is_finite()) {
            return bad(format!("rms_eps {} must be positive", self.rms_eps));
        }
        let largest = [
            self.vocab.checked_mul(self.hidden),
            self.qkv_dim().checked_mul(self.hidden),
            self.intermediate.checked_mul(2 * self.hidden),
            self.max_len.checked_mul(self.head_dim),
        ];
        if largest
            .iter()
            .any(|n| n.is_none_or(|n| n > u32::MAX as usize))
        {
            return bad("a weight matrix exceeds 2^32 elements".to_owned());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_have_the_stated_parameter_counts() {
        assert_eq!(Config::tiny().num_params(), 106_816);
        assert_eq!(Config::small_0_5b().num_params(), 348_701_696);
        assert_eq!(Config::medium_1_5b().num_params(), 1_452_394_496);
        for c in [Config::tiny(), Config::small_0_5b(), Config::medium_1_5b()] {
            c.validate().unwrap();
            assert_eq!(c.q_dim(), c.hidden);
        }
    }

    #[test]
    fn bad_sizes_are_refused() {
        let bad = [
            Config {
                kv_heads: 3,
                ..Config::tiny()
            },
            Config {
                head_dim: 15,
                ..Config::tiny()
            },
            Config {
                head_dim: 512,
                ..Config::tiny()
            },
            Config {
                layers: 0,
                ..Config::tiny()
            },
            Config {
                rms_eps: 0.0,
                ..Config::tiny()
            },
        ];
        for c in bad {
            assert!(matches!(c.validate(), Err(GraphError::ArgumentMismatch(_))));
        }
        assert!(Config::preset("huge").is_err());
        assert_eq!(Config::preset("small").unwrap(), Config::small_0_5b());
    }
}
