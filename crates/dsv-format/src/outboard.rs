//! Verified byte ranges: the BLAKE3 chaining values of a file's 64 KiB blocks (an
//! *outboard*, as Bao and iroh's bao-tree call hash data kept apart from the content).
//!
//! A file id is the BLAKE3 hash of the file, and BLAKE3 is a Merkle tree over 1 KiB chunks
//! (the BLAKE3 paper, section 2.1). Every subtree that starts at a multiple of 64 KiB and
//! spans 64 KiB (or the file's tail) is a node of that tree, so its *chaining value* (32
//! bytes) can be computed from those bytes alone, and the chaining values of all blocks,
//! merged up the tree, give the file id. Hence:
//!
//! - an outboard is proven against the file id without any file byte ([`Outboard::decode`]
//!   merges its values to the root and compares: ~0.7 ms for a 600 MB file);
//! - a block's bytes are then proven against their value alone ([`Outboard::check_block`]),
//!   so a reader can serve bytes `[a, b)` of a file after fetching only the blocks that
//!   cover them, and never serves a byte that does not hash into the file id.
//!
//! The merge follows the BLAKE3 tree exactly ([`blake3::hazmat::left_subtree_len`]): for
//! input longer than 64 KiB the left subtree is the largest power of two of 1 KiB chunks
//! shorter than the input, always a whole number of blocks, so a block is never split.
//!
//! Files of at most one block (64 KiB) have no outboard: their id is their root hash, and a
//! reader proves them whole. The encoding is in `docs/format.md` ("Outboard encoding").

use blake3::hazmat::{
    ChainingValue, HasherExt, Mode, left_subtree_len, merge_subtrees_non_root, merge_subtrees_root,
};

use crate::id::ObjectId;

/// Bytes of one block: the unit a reader proves. 64 BLAKE3 chunks.
pub const BLOCK_LEN: u64 = 64 * 1024;

/// The magic at the start of an outboard's encoding.
pub const MAGIC: &[u8; 8] = b"DSVOUTB1";

/// Bytes before the chaining values: magic, block length (u32), file size (u64).
const HEADER_LEN: usize = 8 + 4 + 8;

/// Number of blocks of a file of `size` bytes (`ceil(size / BLOCK_LEN)`; 0 for an empty
/// file).
pub(crate) fn block_count(size: u64) -> u64 {
    size.div_ceil(BLOCK_LEN)
}

/// Whether a file of `size` bytes has an outboard: more than one block.
pub fn has_outboard(size: u64) -> bool {
    size > BLOCK_LEN
}

/// The chaining values of a file's blocks, proven against the file id when decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outboard {
    size: u64,
    values: Vec<ChainingValue>,
}

impl Outboard {
    /// The file's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Number of blocks.
    pub fn blocks(&self) -> usize {
        self.values.len()
    }

    /// The byte range `[start, end)` of block `index` in the file.
    pub fn block_range(&self, index: usize) -> std::ops::Range<u64> {
        let start = index as u64 * BLOCK_LEN;
        start..(start + BLOCK_LEN).min(self.size)
    }

    /// The canonical encoding (see `docs/format.md`).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + self.values.len() * 32);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(BLOCK_LEN as u32).to_le_bytes());
        out.extend_from_slice(&self.size.to_le_bytes());
        for value in &self.values {
            out.extend_from_slice(value);
        }
        out
    }

    /// Decodes an outboard and proves it against `id`, the file id it is stored under: its
    /// values, merged up the BLAKE3 tree, must give `id`. Bounded before anything is
    /// allocated: the length must be exactly that of the block count its size implies.
    ///
    /// # Errors
    /// A description of the first problem: bad magic, a block length other than
    /// [`BLOCK_LEN`], a size of one block or less, a length that does not match the size,
    /// or values that do not merge to `id`.
    pub fn decode(data: &[u8], id: &ObjectId) -> Result<Outboard, String> {
        if data.len() < HEADER_LEN || &data[..8] != MAGIC {
            return Err("bad magic or truncated header".into());
        }
        let block_len = u32::from_le_bytes(data[8..12].try_into().expect("4 bytes"));
        if u64::from(block_len) != BLOCK_LEN {
            return Err(format!(
                "block length {block_len}, but this version reads only {BLOCK_LEN}"
            ));
        }
        let size = u64::from_le_bytes(data[12..20].try_into().expect("8 bytes"));
        if !has_outboard(size) {
            return Err(format!("a file of {size} bytes has no outboard"));
        }
        let expected = block_count(size)
            .checked_mul(32)
            .and_then(|n| n.checked_add(HEADER_LEN as u64));
        if expected != Some(data.len() as u64) {
            return Err(format!(
                "{} bytes, but a file of {size} bytes needs {} block values",
                data.len(),
                block_count(size)
            ));
        }
        let values: Vec<ChainingValue> = data[HEADER_LEN..]
            .chunks_exact(32)
            .map(|value| value.try_into().expect("32 bytes"))
            .collect();
        let outboard = Outboard { size, values };
        if outboard.root() != *id {
            return Err("its block values do not hash to the file id".into());
        }
        Ok(outboard)
    }

    /// The root hash the block values merge to (the file id when they are right).
    fn root(&self) -> ObjectId {
        let left = left_subtree_len(self.size);
        let split = (left / BLOCK_LEN) as usize;
        let root = merge_subtrees_root(
            &merge(&self.values[..split], left),
            &merge(&self.values[split..], self.size - left),
            Mode::Hash,
        );
        ObjectId::from(root)
    }

    /// Checks `bytes`, the whole of block `index`, against its value.
    ///
    /// # Errors
    /// A description when the bytes are not that block (wrong length or content).
    pub fn check_block(&self, index: usize, bytes: &[u8]) -> Result<(), String> {
        let range = self.block_range(index);
        if index >= self.values.len() || bytes.len() as u64 != range.end - range.start {
            return Err(format!("block {index} has the wrong length"));
        }
        if block_value(range.start, bytes) != self.values[index] {
            return Err(format!(
                "bytes {}..{} do not hash to their block value",
                range.start, range.end
            ));
        }
        Ok(())
    }
}

/// The chaining value of the subtree of `values` (consecutive blocks) spanning `len` bytes.
fn merge(values: &[ChainingValue], len: u64) -> ChainingValue {
    if values.len() == 1 {
        return values[0];
    }
    let left = left_subtree_len(len);
    let split = (left / BLOCK_LEN) as usize;
    merge_subtrees_non_root(
        &merge(&values[..split], left),
        &merge(&values[split..], len - left),
        Mode::Hash,
    )
}

/// The chaining value of one block starting at byte `offset` of a file of more than one
/// block.
fn block_value(offset: u64, bytes: &[u8]) -> ChainingValue {
    blake3::Hasher::new()
        .set_input_offset(offset)
        .update(bytes)
        .finalize_non_root()
}

/// Hashes a file as it streams by: its id and, for a file of more than one block, its
/// outboard, in one pass (each byte is hashed once, as `blake3::hash` would).
#[derive(Default)]
pub struct BlockHasher {
    block: blake3::Hasher,
    in_block: u64,
    size: u64,
    values: Vec<ChainingValue>,
}

impl BlockHasher {
    /// A hasher for a file starting now.
    pub fn new() -> BlockHasher {
        BlockHasher::default()
    }

    /// Adds the file's next bytes.
    pub fn update(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.in_block == BLOCK_LEN {
                // A full block followed by more bytes: it is not the root, so its value
                // is final.
                self.values.push(self.block.finalize_non_root());
                self.block = blake3::Hasher::new();
                self.block.set_input_offset(self.size);
                self.in_block = 0;
            }
            let take = ((BLOCK_LEN - self.in_block) as usize).min(bytes.len());
            self.block.update(&bytes[..take]);
            self.in_block += take as u64;
            self.size += take as u64;
            bytes = &bytes[take..];
        }
    }

    /// The file id, and the outboard when the file has more than one block.
    pub fn finalize(mut self) -> (ObjectId, Option<Outboard>) {
        if self.values.is_empty() {
            return (ObjectId::from(self.block.finalize()), None);
        }
        self.values.push(self.block.finalize_non_root());
        let outboard = Outboard {
            size: self.size,
            values: self.values,
        };
        (outboard.root(), Some(outboard))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(len: usize, seed: u64) -> Vec<u8> {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect()
    }

    /// Every length class: empty, inside one BLAKE3 chunk, one block exactly, +-1 around
    /// block multiples and powers of two (where the tree's left subtree changes), odd tails.
    fn lengths() -> Vec<usize> {
        let block = BLOCK_LEN as usize;
        let mut lengths = vec![0, 1, 1023, 1024, 1025, block - 1, block, block + 1];
        for blocks in [2usize, 3, 4, 5, 7, 8, 9, 16, 17, 31, 32, 33, 64, 65] {
            lengths.extend([blocks * block - 1, blocks * block, blocks * block + 1]);
            lengths.push(blocks * block + 1000);
        }
        lengths.sort_unstable();
        lengths.dedup();
        lengths
    }

    #[test]
    fn the_hasher_gives_blake3_for_every_length_class_however_the_input_is_split() {
        for len in lengths() {
            let data = bytes(len, len as u64);
            let expected = ObjectId::from(blake3::hash(&data));
            let pieces: &[usize] = if len > 300_000 {
                &[1000, 100_000, usize::MAX]
            } else {
                &[1, 1000, 65_536, 100_000, usize::MAX]
            };
            for &piece in pieces {
                let mut hasher = BlockHasher::new();
                for part in data.chunks(piece.min(data.len().max(1))) {
                    hasher.update(part);
                }
                let (id, outboard) = hasher.finalize();
                assert_eq!(id, expected, "length {len}, pieces of {piece}");
                assert_eq!(outboard.is_some(), has_outboard(len as u64), "length {len}");
            }
        }
    }

    #[test]
    fn an_outboard_proves_itself_and_each_block_of_every_length_class() {
        for len in lengths() {
            let data = bytes(len, 7 + len as u64);
            let mut hasher = BlockHasher::new();
            hasher.update(&data);
            let (id, outboard) = hasher.finalize();
            let Some(outboard) = outboard else { continue };
            let encoded = outboard.encode();
            assert_eq!(
                encoded.len() as u64,
                HEADER_LEN as u64 + 32 * block_count(len as u64)
            );
            let decoded = Outboard::decode(&encoded, &id).unwrap();
            assert_eq!(decoded, outboard);
            for index in 0..decoded.blocks() {
                let range = decoded.block_range(index);
                let block = &data[range.start as usize..range.end as usize];
                decoded.check_block(index, block).unwrap();
                let mut changed = block.to_vec();
                changed[block.len() / 2] ^= 1;
                assert!(decoded.check_block(index, &changed).is_err());
                assert!(decoded.check_block(index, &block[1..]).is_err());
            }
            // A block moved to another index does not pass there.
            if decoded.blocks() > 2 {
                let first = &data[..BLOCK_LEN as usize];
                assert!(decoded.check_block(1, first).is_err());
            }
        }
    }

    #[test]
    fn a_changed_or_foreign_outboard_is_refused_before_use() {
        let data = bytes(5 * BLOCK_LEN as usize + 17, 3);
        let mut hasher = BlockHasher::new();
        hasher.update(&data);
        let (id, outboard) = hasher.finalize();
        let encoded = outboard.unwrap().encode();
        // Any value changed.
        for position in [HEADER_LEN, HEADER_LEN + 40, encoded.len() - 1] {
            let mut bad = encoded.clone();
            bad[position] ^= 0x80;
            assert!(Outboard::decode(&bad, &id).is_err(), "byte {position}");
        }
        // Another file's id.
        assert!(Outboard::decode(&encoded, &ObjectId::of(b"other")).is_err());
        // A size that claims more blocks than the values given, or a block of one.
        let mut bigger = encoded.clone();
        bigger[12..20].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(Outboard::decode(&bigger, &id).is_err());
        let mut small = encoded.clone();
        small[12..20].copy_from_slice(&BLOCK_LEN.to_le_bytes());
        assert!(Outboard::decode(&small, &id).is_err());
        // Truncated, or another block length.
        assert!(Outboard::decode(&encoded[..encoded.len() - 32], &id).is_err());
        assert!(Outboard::decode(&encoded[..10], &id).is_err());
        let mut other_block = encoded.clone();
        other_block[8..12].copy_from_slice(&(1024u32 * 1024).to_le_bytes());
        assert!(Outboard::decode(&other_block, &id).is_err());
    }

    /// The largest file of the real corpus in shared/data, when present (a CI machine has
    /// it; the test says when it does not).
    #[test]
    fn the_largest_file_of_the_corpus_hashes_alike() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data");
        let Some(largest) = std::fs::read_dir(&dir).ok().and_then(|entries| {
            entries
                .filter_map(|e| e.ok())
                .max_by_key(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
        }) else {
            // Without the corpus a generated file of the same order stands in.
            let data = bytes(21 * 1024 * 1024 + 3, 11);
            let mut hasher = BlockHasher::new();
            hasher.update(&data);
            assert_eq!(hasher.finalize().0, ObjectId::from(blake3::hash(&data)));
            return;
        };
        let data = std::fs::read(largest.path()).unwrap();
        let mut hasher = BlockHasher::new();
        hasher.update(&data);
        let (id, outboard) = hasher.finalize();
        assert_eq!(id, ObjectId::from(blake3::hash(&data)));
        let outboard = Outboard::decode(&outboard.unwrap().encode(), &id).unwrap();
        let last = outboard.blocks() - 1;
        let range = outboard.block_range(last);
        outboard
            .check_block(last, &data[range.start as usize..])
            .unwrap();
    }
}
