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
}
