//! Deterministic random numbers for weights and prompts: SplitMix64, one stream per tensor,
//! so a tensor's values depend only on the seed and the tensor (generated one at a time, on any
//! machine, in any order).

/// SplitMix64: a small, fast, statistically sound 64-bit generator.
///
/// ```
/// use accel_graph_decode::init::SplitMix64;
/// let mut a = SplitMix64::new(7);
/// let mut b = SplitMix64::new(7);
/// assert_eq!(a.next_u64(), b.next_u64());
/// let u = a.uniform();
/// assert!((-1.0..1.0).contains(&u));
/// ```
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// The generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The generator of stream `stream` of `seed`: streams of one seed are independent.
    pub fn stream(seed: u64, stream: u64) -> Self {
        let mut g = SplitMix64(seed ^ stream.wrapping_mul(0xd1b5_4a32_d192_ed03));
        // Mix once, so that neighbouring streams do not begin with related states.
        let mixed = g.next_u64();
        SplitMix64(mixed)
    }

    /// Skips the next `n` values: the generator then gives what it would after `n` calls of
    /// [`SplitMix64::next_u64`] (SplitMix64's state only advances by a constant), so a long
    /// stream can be generated in parallel chunks.
    ///
    /// ```
    /// use accel_graph_decode::init::SplitMix64;
    /// let (mut a, mut b) = (SplitMix64::new(1), SplitMix64::new(1));
    /// a.next_u64();
    /// a.next_u64();
    /// b.skip(2);
    /// assert_eq!(a.next_u64(), b.next_u64());
    /// ```
    pub fn skip(&mut self, n: u64) {
        self.0 = self.0.wrapping_add(n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform `f32` in `[-1, 1)`, a multiple of 2⁻²³ (exact in `f32`).
    pub fn uniform(&mut self) -> f32 {
        let bits = (self.next_u64() >> 40) as u32; // 24 bits
        (bits as f32) * (1.0 / 8_388_608.0) - 1.0
    }

    /// A uniform integer in `0..n` (`n > 0`; the modulo bias is below 2⁻³² for `n < 2³²`).
    pub fn below(&mut self, n: u32) -> u32 {
        (self.next_u64() % u64::from(n.max(1))) as u32
    }
}

/// `n` random prompt tokens in `0..vocab` for sequence `sequence` of `seed`.
///
/// ```
/// let p = accel_graph_decode::init::prompt(3, 1, 8, 256);
/// assert_eq!(p.len(), 8);
/// assert!(p.iter().all(|&t| t < 256));
/// assert_eq!(p, accel_graph_decode::init::prompt(3, 1, 8, 256));
/// ```
pub fn prompt(seed: u64, sequence: u64, n: usize, vocab: u32) -> Vec<u32> {
    let mut g = SplitMix64::stream(seed ^ 0x5eed_0f70_6b65_6e73, sequence);
    (0..n).map(|_| g.below(vocab)).collect()
}
