//! [`Bitset`]: one bit per timer, to check that each fired exactly once.

/// A fixed-size set of indices `0..len`.
#[derive(Clone, Debug)]
pub struct Bitset {
    words: Vec<u64>,
}

impl Bitset {
    /// An empty set over `0..len`.
    pub fn new(len: usize) -> Bitset {
        Bitset {
            words: vec![0; len.div_ceil(64)],
        }
    }

    /// Adds `index`; returns true if it was already present.
    pub fn insert(&mut self, index: usize) -> bool {
        let (word, bit) = (index / 64, 1u64 << (index % 64));
        let present = self.words[word] & bit != 0;
        self.words[word] |= bit;
        present
    }

    /// Members.
    pub fn count(&self) -> u64 {
        self.words.iter().map(|w| u64::from(w.count_ones())).sum()
    }

    /// Indices present in both sets.
    pub fn overlap(&self, other: &Bitset) -> u64 {
        self.words
            .iter()
            .zip(&other.words)
            .map(|(a, b)| u64::from((a & b).count_ones()))
            .sum()
    }

    /// Adds every member of `other` (same length) and returns how many were already present.
    pub fn union_counting_overlap(&mut self, other: &Bitset) -> u64 {
        let overlap = self.overlap(other);
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= b;
        }
        overlap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_count_and_union() {
        let mut a = Bitset::new(130);
        assert!(!a.insert(0));
        assert!(a.insert(0));
        a.insert(129);
        let mut b = Bitset::new(130);
        b.insert(129);
        b.insert(64);
        assert_eq!(a.union_counting_overlap(&b), 1);
        assert_eq!(a.count(), 3);
        assert!(a.insert(64), "64 came from b");
        assert!(!a.insert(65));
    }
}
