//! Resemblance detection for gc's deltas: which chunks stored whole hold much of the content
//! of a given chunk, whatever their paths, so that a chunk can be stored as a delta against
//! them. On a table series, a file that aggregates another (per-country totals of a
//! per-province table) shares most of its bytes with that file's chunks, yet no path or
//! offset relates the two; the same holds for a file renamed or split.
//!
//! # Features (Broder's sampled shingles)
//!
//! A chunk's *features* are a content-defined sample of the hashes of its 16-byte windows
//! (shingles): a gear hash rolls over the bytes (each step `h = (h << 4) + GEAR[byte]`, so
//! the value depends on the last 16 bytes), and a window is sampled when the top 6 bits of
//! its hash are zero, about one window in 64 ([`SAMPLE_BITS`]). Sampling by value rather
//! than position is what makes two chunks that share a run of bytes share the features in
//! it, wherever the run sits in each (A. Z. Broder, "On the resemblance and containment of
//! documents", Compression and Complexity of Sequences 1997, the "mod m" sample).
//!
//! The index keeps, of each chunk it is given ([`Resemblance::add`]), the [`SKETCH`]
//! smallest features after mixing (a bottom-k sketch, same paper): 32 numbers a chunk, so
//! its memory is bounded by [`MAX_ENTRIES`]. A query ([`Resemblance::similar`]) looks up every
//! feature of the chunk asked about, and picks at most [`MAX_BASES`] chunks greedily: each
//! time the one whose sketch holds the most of the query's features not yet covered by
//! those already picked, while that count is at least [`MIN_NEW_FEATURES`].
//!
//! Measured with a Python prototype of this sampling (16-byte windows, one in 64, the same
//! greedy pick) on the head version of 10 daily versions of a public CSV series
//! (datasets/covid-19, 5 files, 7.2 MB; `docs/bench-deltas.md`), cut in 64 KiB pieces
//! compressed at zstd 19: alone 1.109 MB; against the chunks this picks (bottom-32, at most
//! 4 bases) 0.743 MB, with 42 of 115 chunks as deltas and 1.9 bases each. All features
//! instead of a sketch: 0.733 MB; 8 bases: 0.739 MB with 4 times the base records.

use std::collections::HashMap;

use crate::id::ObjectId;

/// Windows are sampled when the top this many bits of their hash are zero (one in 64).
pub const SAMPLE_BITS: u32 = 6;

/// Features kept of each chunk in the index (a bottom-k sketch).
pub const SKETCH: usize = 32;

/// At most this many bases a query picks. Each base costs 36 bytes of pack index and its
/// raw bytes to read (and keep) when the delta is decoded; past two, few chunks of the
/// series above gained anything.
pub const MAX_BASES: usize = 4;

/// A base is picked only when it holds at least this many of the query's features not held
/// by the bases picked before it (a chunk of 64 KiB has about 1,000 features).
pub const MIN_NEW_FEATURES: usize = 2;

/// The index holds at most this many features (about 24 bytes each: 48 MiB), the sketches
/// of 65,536 chunks (4 GiB of chunks at the 64 KiB average). Chunks given past it are not
/// indexed; queries still run.
pub const MAX_ENTRIES: usize = 2 << 20;

/// The width of a shingle in bytes: the gear hash forgets a byte after this many steps.
const WINDOW: u32 = 16;

/// The gear table: 256 pseudo-random 64-bit values (SplitMix64 of the byte, a fixed seed),
/// so the features of a chunk are the same on every machine and in every version of dsv
/// that keeps this table (they are never stored; a change only changes what gc picks).
const GEAR: [u64; 256] = {
    let mut table = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        table[i] = splitmix64(0x6473_765f_6765_6172 ^ i as u64);
        i += 1;
    }
    table
};

/// SplitMix64's output function (Steele, Lea and Flood, "Fast splittable pseudorandom
/// number generators", OOPSLA 2014).
const fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The features of `bytes`: the mixed hashes of its sampled 16-byte windows, sorted and
/// without repeats. Empty for bytes shorter than a window.
pub fn features(bytes: &[u8]) -> Vec<u64> {
    let shift = 64 / WINDOW;
    let mut hash = 0u64;
    let mut out = Vec::with_capacity(bytes.len() >> SAMPLE_BITS);
    for (i, byte) in bytes.iter().enumerate() {
        hash = (hash << shift).wrapping_add(GEAR[usize::from(*byte)]);
        if i + 1 >= WINDOW as usize && hash >> (64 - SAMPLE_BITS) == 0 {
            out.push(splitmix64(hash));
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// An index of chunks by their sketches; see the module notes.
#[derive(Debug, Default)]
pub struct Resemblance {
    /// A feature and the first chunk indexed with it (by its place in `members`).
    postings: HashMap<u64, u32>,
    members: Vec<ObjectId>,
}

impl Resemblance {
    /// Indexes `chunk` by the sketch of its `features` (as [`features`] returns them: sorted),
    /// unless the index is full. A feature another chunk already has stays that chunk's.
    pub fn add(&mut self, chunk: ObjectId, features: &[u64]) {
        if features.is_empty() || self.postings.len() + SKETCH > MAX_ENTRIES {
            return;
        }
        let Ok(member) = u32::try_from(self.members.len()) else {
            return;
        };
        self.members.push(chunk);
        for feature in features.iter().take(SKETCH) {
            self.postings.entry(*feature).or_insert(member);
        }
    }

    /// At most [`MAX_BASES`] indexed chunks holding the most of `features` (a chunk's,
    /// sorted), best first; none of them is `chunk` itself or refused by `usable`.
    pub fn similar(
        &self,
        chunk: &ObjectId,
        features: &[u64],
        usable: impl Fn(&ObjectId) -> bool,
    ) -> Vec<ObjectId> {
        let mut hits: HashMap<u32, Vec<u64>> = HashMap::new();
        for feature in features {
            if let Some(member) = self.postings.get(feature) {
                hits.entry(*member).or_default().push(*feature);
            }
        }
        hits.retain(|member, _| {
            let id = &self.members[*member as usize];
            id != chunk && usable(id)
        });
        let mut covered: std::collections::HashSet<u64> = std::collections::HashSet::new();
        let mut picked: Vec<u32> = Vec::new();
        while picked.len() < MAX_BASES {
            let best = hits
                .iter()
                .filter(|(member, _)| !picked.contains(member))
                .map(|(member, found)| {
                    let new = found.iter().filter(|f| !covered.contains(f)).count();
                    // Ties go to the chunk indexed first, so a pass picks the same on every run.
                    (new, std::cmp::Reverse(*member))
                })
                .max();
            let Some((new, std::cmp::Reverse(member))) = best else {
                break;
            };
            if new < MIN_NEW_FEATURES {
                break;
            }
            covered.extend(hits[&member].iter().copied());
            picked.push(member);
        }
        picked
            .into_iter()
            .map(|member| self.members[member as usize])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> ObjectId {
        ObjectId([n; 32])
    }

    /// Pseudo-random text-like bytes: `len` bytes from a seed.
    fn noise(seed: u64, len: usize) -> Vec<u8> {
        (0..len as u64)
            .map(|i| b'a' + (splitmix64(seed ^ (i << 8)) % 26) as u8)
            .collect()
    }

    #[test]
    fn features_are_content_defined_and_shared_by_shared_runs() {
        let run = noise(1, 20_000);
        let mut a = noise(2, 3_000);
        a.extend_from_slice(&run);
        let mut b = noise(3, 7_001);
        b.extend_from_slice(&run);
        b.extend_from_slice(&noise(4, 5_000));
        let (fa, fb, fr) = (features(&a), features(&b), features(&run));
        // About one window in 64 is sampled.
        assert!(
            fr.len() > 20_000 / 64 / 2 && fr.len() < 20_000 / 64 * 2,
            "{}",
            fr.len()
        );
        // Every feature of the shared run (past its first window) is in both.
        let shared = fr
            .iter()
            .filter(|f| fa.contains(f) && fb.contains(f))
            .count();
        assert!(shared + 1 >= fr.len(), "{shared} of {}", fr.len());
        assert!(features(&[1u8; 15]).is_empty());
        assert!(fa.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn similar_picks_the_chunks_holding_the_content_and_covers_greedily() {
        let (p, q, r) = (noise(10, 30_000), noise(11, 30_000), noise(12, 30_000));
        let mut index = Resemblance::default();
        index.add(id(1), &features(&p));
        index.add(id(2), &features(&q));
        index.add(id(3), &features(&r));
        // Half of p and half of q: both picked, p first (ties to the first indexed), not r.
        let mut query = p[..15_000].to_vec();
        query.extend_from_slice(&q[15_000..]);
        let picked = index.similar(&id(9), &features(&query), |_| true);
        assert_eq!(picked.len(), 2, "{picked:?}");
        assert!(picked.contains(&id(1)) && picked.contains(&id(2)));
        // Nothing shared: nothing picked; the chunk itself and refused ones never.
        assert!(
            index
                .similar(&id(9), &features(&noise(13, 30_000)), |_| true)
                .is_empty()
        );
        assert!(index.similar(&id(1), &features(&p), |_| true).is_empty());
        assert_eq!(
            index.similar(&id(9), &features(&p), |c| *c != id(1)),
            vec![]
        );
    }

    #[test]
    fn the_index_stops_growing_at_its_cap() {
        let mut index = Resemblance::default();
        let many: Vec<u64> = (0..SKETCH as u64 * 2).collect();
        for n in 0..(MAX_ENTRIES / SKETCH + 10) {
            let features: Vec<u64> = many.iter().map(|f| f + (n as u64) * 1_000).collect();
            index.add(ObjectId([(n % 251) as u8; 32]), &features);
        }
        assert!(index.postings.len() <= MAX_ENTRIES);
        assert_eq!(index.members.len(), MAX_ENTRIES / SKETCH);
    }
}
