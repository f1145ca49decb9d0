//! An exact set of fixed-size keys (object ids, with a kind byte or not) whose memory is
//! bounded: recent keys in a hash set, older ones in a sorted array, and past
//! [`SETTLED_KEYS`] the array moves into a sorted run on disk (an unnamed temporary file,
//! so nothing is left behind by a crash). Each run is looked up through an index of its
//! blocks' first keys and a Bloom filter (B. H. Bloom, "Space/time trade-offs in hash coding
//! with allowable errors", CACM 13(7), 1970) that spares a disk read for most keys the run
//! lacks. Runs are merged as in a log-structured merge tree (P. O'Neil et al., "The
//! log-structured merge-tree", Acta Informatica 33, 1996): a new run absorbs the newest runs
//! no more than twice its size, so run sizes at least double from newest to oldest, there
//! are O(log(n / SETTLED_KEYS)) of them, and each key is rewritten O(log) times.
//!
//! Exact: the filter only decides whether to read a block; a block's keys decide the answer.
//! A set that may answer wrongly cannot be used where a wrong "seen" skips writing or
//! checking an object.
//!
//! Memory: about N bytes a key up to [`SETTLED_KEYS`] + [`RECENT_KEYS`] keys; past that,
//! per spilled key N / [`BLOCK_KEYS`] bytes of block index and [`FILTER_BITS_PER_KEY`] bits
//! of filter (about 1.8 bytes a key for N = 33). Disk: N bytes a spilled key, written
//! sequentially about log2(n / [`SETTLED_KEYS`]) times in all.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Keys a [`KeySet`] holds in its hash set before merging them into its sorted array.
pub(crate) const RECENT_KEYS: usize = 65_536;
/// Keys a spilling [`KeySet`] holds in its sorted array before moving them to disk
/// (17 MiB of 33-byte keys).
pub(crate) const SETTLED_KEYS: usize = 1 << 19;
/// Keys in one block of the run on disk: the unit read to answer a lookup (2 KiB of 33-byte
/// keys).
pub(crate) const BLOCK_KEYS: usize = 64;
/// Bloom filter bits per key on disk (with [`FILTER_HASHES`]: about 1% false positives).
pub(crate) const FILTER_BITS_PER_KEY: usize = 10;
/// Bit positions a key sets in the filter.
const FILTER_HASHES: u64 = 7;

/// The set. [`KeySet::default`] keeps every key in memory (about N bytes each: a hash set of
/// every key took about 2.6 times as much, as its table rounds up to a power of two);
/// [`KeySet::spilling_to`] bounds memory by moving older keys to disk.
pub(crate) struct KeySet<const N: usize> {
    /// Keys inserted since the last merge.
    recent: HashSet<[u8; N]>,
    /// Keys inserted before it (and after the last spill), sorted.
    settled: Vec<[u8; N]>,
    /// The oldest keys, sorted, on disk: oldest (largest) run first.
    spilled: Vec<Run<N>>,
    /// Where runs go; `None` for a set held in memory (or one whose spill failed).
    spill_dir: Option<PathBuf>,
    recent_limit: usize,
    settled_limit: usize,
}

impl<const N: usize> Default for KeySet<N> {
    fn default() -> Self {
        KeySet::with_limits(None, RECENT_KEYS, usize::MAX)
    }
}

/// A sorted run of keys in an unnamed temporary file.
struct Run<const N: usize> {
    file: File,
    keys: usize,
    /// The first key of every block of [`BLOCK_KEYS`].
    firsts: Vec<[u8; N]>,
    /// Bloom filter over the run's keys.
    filter: Vec<u64>,
}

impl<const N: usize> KeySet<N> {
    /// A set that moves keys past [`SETTLED_KEYS`] to an unnamed temporary file in `dir`. If
    /// a spill cannot be written (a full disk), the set keeps its keys in memory from then on
    /// (still exact, no longer bounded).
    pub(crate) fn spilling_to(dir: &Path) -> Self {
        KeySet::with_limits(Some(dir.to_path_buf()), RECENT_KEYS, SETTLED_KEYS)
    }

    fn with_limits(spill_dir: Option<PathBuf>, recent_limit: usize, settled_limit: usize) -> Self {
        const { assert!(N >= 16, "the filter hashes a key's first 16 bytes") };
        KeySet {
            recent: HashSet::new(),
            settled: Vec::new(),
            spilled: Vec::new(),
            spill_dir,
            recent_limit,
            settled_limit,
        }
    }

    /// Number of keys in the set.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.recent.len() + self.settled.len() + self.spilled.iter().map(|r| r.keys).sum::<usize>()
    }

    /// True if `key` is in the set.
    ///
    /// # Errors
    /// A failed read of the run on disk.
    pub fn contains(&self, key: &[u8; N]) -> std::io::Result<bool> {
        if self.recent.contains(key) || self.settled.binary_search(key).is_ok() {
            return Ok(true);
        }
        for run in &self.spilled {
            if run.contains(key)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// True if `key` was not in the set (and is now), as `HashSet::insert`.
    ///
    /// # Errors
    /// A failed read of the run on disk (the key is then not inserted).
    pub fn insert(&mut self, key: [u8; N]) -> std::io::Result<bool> {
        if self.contains(&key)? {
            return Ok(false);
        }
        self.recent.insert(key);
        if self.recent.len() >= self.recent_limit {
            self.merge();
            if self.settled.len() >= self.settled_limit {
                self.spill();
            }
        }
        Ok(true)
    }

    /// Moves the recent keys into the sorted array: a merge from the back, in place, O(n).
    fn merge(&mut self) {
        let mut fresh: Vec<[u8; N]> = self.recent.drain().collect();
        fresh.sort_unstable();
        let settled = self.settled.len();
        self.settled.reserve_exact(fresh.len());
        self.settled.resize(settled + fresh.len(), [0; N]);
        let (mut left, mut right) = (settled, fresh.len());
        for slot in (0..self.settled.len()).rev() {
            if right == 0 {
                break;
            }
            if left > 0 && self.settled[left - 1] > fresh[right - 1] {
                self.settled[slot] = self.settled[left - 1];
                left -= 1;
            } else {
                self.settled[slot] = fresh[right - 1];
                right -= 1;
            }
        }
    }

    /// Merges the sorted array, and the newest runs no more than twice the size of what is
    /// merged so far, into a new run on disk. On failure nothing moves, and the set stops
    /// spilling.
    fn spill(&mut self) {
        let Some(dir) = &self.spill_dir else {
            return;
        };
        let mut keys = self.settled.len();
        let mut first = self.spilled.len();
        while first > 0 && self.spilled[first - 1].keys <= 2 * keys {
            first -= 1;
            keys += self.spilled[first].keys;
        }
        match Run::merged(dir, &self.spilled[first..], &self.settled) {
            Ok(run) => {
                self.spilled.truncate(first);
                self.spilled.push(run);
                self.settled = Vec::new();
            }
            Err(error) => {
                tracing::debug!(%error, dir = %dir.display(), "a key set could not spill; it stays in memory");
                self.spill_dir = None;
            }
        }
    }
}

impl<const N: usize> Run<N> {
    /// A run holding the keys of `runs` and of `settled` (each sorted, no key in two).
    fn merged(dir: &Path, runs: &[Run<N>], settled: &[[u8; N]]) -> std::io::Result<Run<N>> {
        let keys = runs.iter().map(|r| r.keys).sum::<usize>() + settled.len();
        let file = tempfile::tempfile_in(dir)?;
        let mut firsts = Vec::with_capacity(keys.div_ceil(BLOCK_KEYS));
        let mut filter = vec![0u64; (keys * FILTER_BITS_PER_KEY).div_ceil(64).max(1)];
        let filter_bits = filter.len() * 64;
        let mut out = BufWriter::with_capacity(1 << 16, &file);
        // A k-way merge: the head of each source (the array last), the least one written
        // next. There are few sources (O(log n)), so a scan finds the least.
        let mut inputs = Vec::with_capacity(runs.len());
        for run in runs {
            let mut input = BufReader::with_capacity(1 << 16, &run.file);
            input.seek(SeekFrom::Start(0))?;
            inputs.push((input, run.keys));
        }
        let mut heads: Vec<Option<[u8; N]>> = Vec::with_capacity(runs.len() + 1);
        for (input, left) in &mut inputs {
            heads.push(next_key(input, left)?);
        }
        let mut fresh = settled.iter();
        heads.push(fresh.next().copied());
        for written in 0..keys {
            let (source, key) = heads
                .iter()
                .enumerate()
                .filter_map(|(source, head)| head.map(|key| (source, key)))
                .min_by(|a, b| a.1.cmp(&b.1))
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
            heads[source] = match inputs.get_mut(source) {
                Some((input, left)) => next_key(input, left)?,
                None => fresh.next().copied(),
            };
            if written.is_multiple_of(BLOCK_KEYS) {
                firsts.push(key);
            }
            for bit in Run::<N>::bits(&key, filter_bits) {
                filter[bit / 64] |= 1 << (bit % 64);
            }
            out.write_all(&key)?;
        }
        out.flush()?;
        drop(out);
        Ok(Run {
            file,
            keys,
            firsts,
            filter,
        })
    }

    /// The filter bits of `key` in a filter of `bits` bits: double hashing over the key's
    /// first 16 bytes (keys are BLAKE3 ids, uniform already; a crafted key costs only a
    /// block read, never a wrong answer).
    fn bits(key: &[u8; N], bits: usize) -> impl Iterator<Item = usize> {
        let first = u64::from_le_bytes(key[..8].try_into().expect("8 bytes"));
        let step = u64::from_le_bytes(key[8..16].try_into().expect("8 bytes")) | 1;
        (0..FILTER_HASHES)
            .map(move |i| (first.wrapping_add(i.wrapping_mul(step)) % bits as u64) as usize)
    }

    fn contains(&self, key: &[u8; N]) -> std::io::Result<bool> {
        let bits = self.filter.len() * 64;
        if Run::<N>::bits(key, bits).any(|bit| self.filter[bit / 64] & (1 << (bit % 64)) == 0) {
            return Ok(false);
        }
        let block = match self.firsts.partition_point(|first| first <= key) {
            0 => return Ok(false),
            after => after - 1,
        };
        let start = block * BLOCK_KEYS;
        let count = BLOCK_KEYS.min(self.keys - start);
        let mut bytes = vec![0u8; count * N];
        self.file.read_exact_at(&mut bytes, (start * N) as u64)?;
        let mut low = 0;
        let mut high = count;
        while low < high {
            let middle = (low + high) / 2;
            match bytes[middle * N..(middle + 1) * N].cmp(&key[..]) {
                std::cmp::Ordering::Less => low = middle + 1,
                std::cmp::Ordering::Greater => high = middle,
                std::cmp::Ordering::Equal => return Ok(true),
            }
        }
        Ok(false)
    }
}

/// The next key of a run being read, `left` keys before its end.
fn next_key<const N: usize>(
    input: &mut BufReader<&File>,
    left: &mut usize,
) -> std::io::Result<Option<[u8; N]>> {
    if *left == 0 {
        return Ok(None);
    }
    let mut key = [0u8; N];
    input.read_exact(&mut key)?;
    *left -= 1;
    Ok(Some(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u64) -> [u8; 33] {
        let mut key = [0u8; 33];
        key[..32].copy_from_slice(blake3::hash(&n.to_le_bytes()).as_bytes());
        key[32] = (n % 3) as u8;
        key
    }

    /// Inserts every key of 0..total, then all of them again in another order, against a
    /// hash set; then asks for keys never inserted.
    fn check_against_a_hash_set(set: &mut KeySet<33>, total: u64) {
        let mut reference = HashSet::new();
        for step in 0..2 * total {
            // 7,919 is prime and does not divide `total`: a permutation of 0..total.
            let n = if step < total {
                step
            } else {
                (step * 7_919) % total
            };
            assert_eq!(
                set.insert(key(n)).unwrap(),
                reference.insert(key(n)),
                "key {n}"
            );
        }
        for n in total..total + 10_000 {
            assert!(
                !set.contains(&key(n)).unwrap(),
                "key {n} was never inserted"
            );
        }
        assert!(set.settled.is_sorted());
        assert_eq!(set.len(), reference.len());
    }

    #[test]
    fn a_key_set_is_exact_across_merges() {
        let mut set = KeySet::<33>::default();
        check_against_a_hash_set(&mut set, 3 * RECENT_KEYS as u64 + 1_000);
        assert!(set.spilled.is_empty());
    }

    #[test]
    fn a_spilling_key_set_is_exact_across_spills_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let mut set = KeySet::<33>::with_limits(Some(dir.path().to_path_buf()), 1_000, 5_000);
        check_against_a_hash_set(&mut set, 40_123);
        let on_disk: Vec<usize> = set.spilled.iter().map(|r| r.keys).collect();
        assert!(
            on_disk.iter().sum::<usize>() >= 35_000,
            "{on_disk:?} keys on disk"
        );
        // Runs more than double from newest to oldest: few of them.
        assert!(on_disk.windows(2).all(|w| w[0] > 2 * w[1]), "{on_disk:?}");
        assert!(on_disk.len() <= 4, "{on_disk:?}");
        assert!(set.settled.len() + set.recent.len() < 6_000);
        // The run is an unnamed file: nothing is left in the directory.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_key_set_whose_spill_fails_keeps_its_keys_in_memory() {
        let missing = tempfile::tempdir().unwrap().path().join("gone");
        let mut set = KeySet::<33>::with_limits(Some(missing), 1_000, 5_000);
        check_against_a_hash_set(&mut set, 12_345);
        assert!(set.spilled.is_empty());
        assert!(set.spill_dir.is_none());
    }
}
