//! Object ids: 32-byte BLAKE3 hashes, shown as 64 lowercase hex digits.
//!
//! Every object in a store is named by the BLAKE3 hash (<https://github.com/BLAKE3-team/BLAKE3-specs>)
//! of its bytes: a chunk by its raw bytes, a file by the whole file's bytes (so `b3sum FILE`
//! prints a file's id), a tree or version by its canonical encoding (see [`crate::object`]),
//! a pack by the whole pack file.

use std::fmt;
use std::str::FromStr;

/// A 32-byte BLAKE3 hash naming an object.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId(pub [u8; 32]);

impl ObjectId {
    /// Length of an id in bytes.
    pub const LEN: usize = 32;

    /// Hashes `bytes` with BLAKE3.
    pub fn of(bytes: &[u8]) -> Self {
        ObjectId(*blake3::hash(bytes).as_bytes())
    }

    /// The full 64-digit lowercase hex form.
    pub fn to_hex(&self) -> String {
        let mut out = String::with_capacity(64);
        for b in self.0 {
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 0xf) as usize] as char);
        }
        out
    }

    /// The first 12 hex digits, as shown in human output.
    pub fn short(&self) -> String {
        self.to_hex()[..12].to_string()
    }

    /// Reads an id from a 32-byte slice (a catalog BLOB or a binary record).
    ///
    /// Returns `None` when the slice is not exactly 32 bytes long.
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        <[u8; 32]>::try_from(bytes).ok().map(ObjectId)
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl From<blake3::Hash> for ObjectId {
    fn from(hash: blake3::Hash) -> Self {
        ObjectId(*hash.as_bytes())
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjectId({})", self.short())
    }
}

/// The error of parsing a malformed hex id.
#[derive(Debug, thiserror::Error)]
#[error("not a 64-digit hex object id")]
pub struct ParseIdError;

impl FromStr for ObjectId {
    type Err = ParseIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let hash = blake3::Hash::from_hex(s).map_err(|_| ParseIdError)?;
        Ok(hash.into())
    }
}

impl<'de> serde::Deserialize<'de> for ObjectId {
    /// Parses the 64-digit lowercase hex form written by `Serialize`.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse()
            .map_err(|_| serde::de::Error::custom(format!("not a 64-digit hex id: {text:?}")))
    }
}

impl serde::Serialize for ObjectId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_hex())
    }
}

/// Returns true when `s` is a plausible id prefix: 1–64 lowercase hex digits.
pub fn is_hex_prefix(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// An exact set of fixed-size keys (object ids, with a kind byte or not) in about N bytes
/// each: a sorted array searched by bisection, and the latest [`RECENT_KEYS`] in a hash set
/// that is merged into it when full. A hash set of every key took about 2.6 times as much
/// (at a million keys its table rounds up to 2^21 buckets); a filter that may answer
/// wrongly cannot be used where a wrong "seen" skips writing or checking an object.
#[derive(Default)]
pub(crate) struct KeySet<const N: usize> {
    /// Keys inserted before the last merge, sorted.
    settled: Vec<[u8; N]>,
    /// Keys inserted since.
    recent: std::collections::HashSet<[u8; N]>,
}

/// Keys a [`KeySet`] holds in its hash set before merging them into its array.
pub(crate) const RECENT_KEYS: usize = 65_536;

impl<const N: usize> KeySet<N> {
    /// True if `key` was not in the set (and is now), as `HashSet::insert`.
    pub fn insert(&mut self, key: [u8; N]) -> bool {
        if self.settled.binary_search(&key).is_ok() || !self.recent.insert(key) {
            return false;
        }
        if self.recent.len() >= RECENT_KEYS {
            self.merge();
        }
        true
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_matches_b3sum_form() {
        let id = ObjectId::of(b"abc");
        // b3sum of "abc" (BLAKE3 test vector).
        assert_eq!(
            id.to_hex(),
            "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"
        );
        assert_eq!(id.to_hex().parse::<ObjectId>().unwrap(), id);
        assert!("zz".parse::<ObjectId>().is_err());
    }

    #[test]
    fn a_key_set_is_exact_across_merges() {
        // Every key twice, the second time after several merges, against a hash set.
        let mut set = KeySet::<33>::default();
        let mut reference = std::collections::HashSet::new();
        let key = |n: u64| {
            let mut key = [0u8; 33];
            key[..32].copy_from_slice(blake3::hash(&n.to_le_bytes()).as_bytes());
            key[32] = (n % 3) as u8;
            key
        };
        let total = 3 * RECENT_KEYS as u64 + 1_000;
        for step in 0..2 * total {
            // 7,919 is prime and does not divide `total`: a permutation of 0..total.
            let n = if step < total {
                step
            } else {
                (step * 7_919) % total
            };
            assert_eq!(set.insert(key(n)), reference.insert(key(n)), "key {n}");
        }
        assert!(set.settled.is_sorted());
        assert_eq!(set.settled.len() + set.recent.len(), reference.len());
    }
}
