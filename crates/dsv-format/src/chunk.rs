//! Content-defined chunking: FastCDC (Xia et al., "The Design of Fast Content-Defined Chunking
//! for Data Deduplication Based Storage Systems", IEEE TPDS 2020), through the `fastcdc` crate's
//! `v2020` cut function with its default gear table and normalization level 1.
//!
//! Chunk boundaries are an on-disk contract: the same bytes must always cut at the same
//! offsets, or a new version of a file would share nothing with the old one. The golden
//! tests below pin them; changing [`ChunkParams::DEFAULT`] is a format change.

use std::io::{self, Read};

use fastcdc::v2020::{self, Normalization};

/// Minimum, average and maximum chunk sizes, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkParams {
    /// No chunk is shorter than this, except a file's last.
    pub min: usize,
    /// The target average size.
    pub avg: usize,
    /// No chunk is longer than this.
    pub max: usize,
}

impl ChunkParams {
    /// The parameters every dsv store uses: 16 KiB / 64 KiB / 256 KiB.
    pub const DEFAULT: ChunkParams = ChunkParams {
        min: 16 * 1024,
        avg: 64 * 1024,
        max: 256 * 1024,
    };
}

/// Splits a byte stream into content-defined chunks.
///
/// Reads the source in blocks of `4 * max` bytes, so a boundary never depends on how the
/// source's `read` calls happen to split the data (tested below).
pub struct Chunker<R> {
    source: R,
    params: ChunkParams,
    masks: (u64, u64),
    buffer: Vec<u8>,
    /// Start of the unconsumed bytes in `buffer`.
    start: usize,
    /// End of the valid bytes in `buffer`.
    end: usize,
    eof: bool,
}

impl<R: Read> Chunker<R> {
    /// A chunker over `source` with `params`.
    pub fn new(source: R, params: ChunkParams) -> Self {
        Chunker {
            source,
            params,
            masks: v2020::select_masks(params.avg, Normalization::Level1),
            buffer: vec![0; params.max * 4],
            start: 0,
            end: 0,
            eof: false,
        }
    }

    /// Returns the next chunk's bytes, or `None` at the end of the stream.
    ///
    /// # Errors
    /// The source's read errors.
    pub fn next_chunk(&mut self) -> io::Result<Option<&[u8]>> {
        if self.end - self.start < self.params.max && !self.eof {
            self.fill()?;
        }
        let available = &self.buffer[self.start..self.end];
        if available.is_empty() {
            return Ok(None);
        }
        let length = cut_point(available, self.params, self.masks);
        let chunk_start = self.start;
        self.start += length;
        Ok(Some(&self.buffer[chunk_start..chunk_start + length]))
    }

    fn fill(&mut self) -> io::Result<()> {
        self.buffer.copy_within(self.start..self.end, 0);
        self.end -= self.start;
        self.start = 0;
        while self.end < self.buffer.len() {
            match self.source.read(&mut self.buffer[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// The length of the first chunk of `data` (all of it when shorter than `params.min`).
fn cut_point(data: &[u8], params: ChunkParams, (mask_s, mask_l): (u64, u64)) -> usize {
    if data.len() <= params.min {
        return data.len();
    }
    let (_, end) = v2020::cut(
        data,
        params.min,
        params.avg,
        params.max,
        mask_s,
        mask_l,
        mask_s << 1,
        mask_l << 1,
    );
    end
}

/// The chunk lengths of an in-memory buffer, in order (they sum to `data.len()`): the
/// reference the tests compare the streaming chunker with.
#[cfg(test)]
fn chunk_lengths(data: &[u8], params: ChunkParams) -> Vec<usize> {
    let mut chunker = Chunker::new(data, params);
    let mut lengths = Vec::new();
    while let Some(chunk) = chunker.next_chunk().expect("reading a slice cannot fail") {
        lengths.push(chunk.len());
    }
    lengths
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic pseudo-random bytes (xorshift64*), so the golden values never drift.
    fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
        let mut state = seed;
        (0..len)
            .map(|_| {
                state ^= state >> 12;
                state ^= state << 25;
                state ^= state >> 27;
                (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
            })
            .collect()
    }

    /// Hands out at most `step` bytes a read call.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.step.min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn golden_boundaries_for_one_mebibyte_of_pseudo_random_data() {
        let data = pseudo_random(1 << 20, 0x5EED);
        let lengths = chunk_lengths(&data, ChunkParams::DEFAULT);
        assert_eq!(lengths.iter().sum::<usize>(), data.len());
        // Pinned: a change here breaks deduplication against every existing store.
        let ids: Vec<String> = {
            let mut offset = 0;
            lengths
                .iter()
                .map(|&len| {
                    let id = crate::ObjectId::of(&data[offset..offset + len]).short();
                    offset += len;
                    id
                })
                .collect()
        };
        insta::assert_debug_snapshot!((lengths, ids));
    }

    #[test]
    fn boundaries_do_not_depend_on_read_sizes() {
        let data = pseudo_random(3 << 20, 7);
        let expected = chunk_lengths(&data, ChunkParams::DEFAULT);
        for step in [1usize, 37, 255, 4096, 70_000, 1 << 20] {
            let mut chunker = Chunker::new(Trickle { data: &data, step }, ChunkParams::DEFAULT);
            let mut lengths = Vec::new();
            while let Some(chunk) = chunker.next_chunk().unwrap() {
                lengths.push(chunk.len());
            }
            assert_eq!(lengths, expected, "read size {step}");
        }
    }

    #[test]
    fn streaming_matches_the_fastcdc_crates_in_memory_chunker() {
        let data = pseudo_random(5 << 20, 11);
        let p = ChunkParams::DEFAULT;
        let reference: Vec<usize> = v2020::FastCDC::new(&data, p.min, p.avg, p.max)
            .map(|chunk| chunk.length)
            .collect();
        assert_eq!(chunk_lengths(&data, p), reference);
    }

    #[test]
    fn chunks_respect_size_limits() {
        let params = ChunkParams::DEFAULT;
        let mut data = pseudo_random(2 << 20, 99);
        data.extend(std::iter::repeat_n(0u8, 1 << 20)); // a run with no cut points: max-size chunks
        let lengths = chunk_lengths(&data, params);
        let (last, rest) = lengths.split_last().unwrap();
        assert!(*last <= params.max);
        for len in rest {
            assert!(
                (params.min..=params.max).contains(len),
                "chunk of {len} bytes"
            );
        }
        assert!(lengths.contains(&params.max));
    }

    #[test]
    fn an_insertion_only_changes_nearby_chunks() {
        let data = pseudo_random(2 << 20, 3);
        let mut edited = data.clone();
        edited.splice(
            1_000_000..1_000_000,
            b"a few inserted bytes".iter().copied(),
        );
        let ids = |bytes: &[u8]| {
            let mut offset = 0;
            chunk_lengths(bytes, ChunkParams::DEFAULT)
                .into_iter()
                .map(|len| {
                    offset += len;
                    crate::ObjectId::of(&bytes[offset - len..offset])
                })
                .collect::<std::collections::HashSet<_>>()
        };
        let before = ids(&data);
        let after = ids(&edited);
        let changed = after.difference(&before).count();
        assert!(
            changed <= 2,
            "{changed} chunks changed for one small insertion"
        );
    }

    #[test]
    fn empty_and_tiny_inputs() {
        assert!(chunk_lengths(b"", ChunkParams::DEFAULT).is_empty());
        assert_eq!(chunk_lengths(b"hello", ChunkParams::DEFAULT), vec![5]);
    }
}
