//! A fast hash for the sanitizer's maps keyed by block addresses (and byte offsets): they are
//! looked up once per access of every node when a capture ends or a graph is instantiated,
//! where SipHash's resistance to chosen keys buys nothing (the keys are the device's own).

use std::hash::{BuildHasherDefault, Hasher};

/// FxHash's step: rotate, mix in the word, multiply by a large odd constant.
#[derive(Default)]
pub(crate) struct WordHasher(u64);

impl Hasher for WordHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, word: usize) {
        self.write_u64(word as u64);
    }
}

/// A `HashMap` with [`WordHasher`].
pub(crate) type WordMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<WordHasher>>;
