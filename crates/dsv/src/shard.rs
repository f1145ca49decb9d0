//! Shards: worker `I` of `N`'s part of a version (SageMaker's ShardedByS3Key, YogaDL's
//! distributed reads), deterministic, disjoint, covering every file once, and balanced by
//! bytes.
//!
//! Assignment: files sorted by size (largest first, then by path), each given to the shard
//! with the fewest bytes so far (the lowest index on a tie): Graham's longest-processing-
//! time rule (R. L. Graham, "Bounds on multiprocessing timing anomalies", SIAM J. Appl. Math.
//! 17(2), 1969). Every shard ends within one file's size of the ideal (total / N): a shard
//! above the ideal received its last file while it was the least loaded, so it was at most
//! the ideal before it. The result depends only on the paths and sizes, never on the
//! machine, the run or the order files are listed in.

use crate::error::{Error, Result};

/// The most shards a version is split into (`--shard I/N`, `dsv shards REV N`).
pub(crate) const MAX_SHARDS: u32 = 1_000_000;

/// Worker `index` of `count` (0-based), as `--shard I/N` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ShardSpec {
    /// This worker's shard, `0..count`.
    pub index: u32,
    /// How many shards.
    pub count: u32,
}

impl std::str::FromStr for ShardSpec {
    type Err = Error;

    /// Parses `I/N` with `0 <= I < N`, `1 <= N <=` `MAX_SHARDS` (decimal, no sign).
    fn from_str(text: &str) -> Result<ShardSpec> {
        let bad = |reason: &str| Error::InvalidShard {
            spec: text.to_string(),
            reason: reason.to_string(),
        };
        let (index, count) = text
            .split_once('/')
            .ok_or_else(|| bad("expected I/N, e.g. 0/4 (I counts from 0)"))?;
        let number = |part: &str| {
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad("I and N must be whole numbers, e.g. 0/4"));
            }
            part.parse::<u32>()
                .map_err(|_| bad("I and N must be at most 4294967295"))
        };
        let (index, count) = (number(index)?, number(count)?);
        if count == 0 {
            return Err(bad("N must be at least 1"));
        }
        if count > MAX_SHARDS {
            return Err(bad("N must be at most 1000000"));
        }
        if index >= count {
            return Err(bad("I counts from 0 and must be less than N"));
        }
        Ok(ShardSpec { index, count })
    }
}

impl std::fmt::Display for ShardSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// Assigns files (path, size in bytes) to `count` shards; returns for each shard the indexes
/// (into `files`) of its files, in path order. At most `files.len()` shards get a file, so
/// only that many are returned (at least one): shards past the end are empty.
pub(crate) fn assign(files: &[(&str, u64)], count: u32) -> Vec<Vec<usize>> {
    let count = (count.max(1) as usize).min(files.len().max(1));
    // Largest first (longest-processing-time greedy), each to the least loaded shard (the
    // lowest index among equals), found in a min-heap: O(files × log shards).
    let mut order: Vec<usize> = (0..files.len()).collect();
    order.sort_by(|a, b| {
        files[*b]
            .1
            .cmp(&files[*a].1)
            .then(files[*a].0.cmp(files[*b].0))
    });
    let mut loads: std::collections::BinaryHeap<std::cmp::Reverse<(u64, usize)>> = (0..count)
        .map(|shard| std::cmp::Reverse((0, shard)))
        .collect();
    let mut shards = vec![Vec::new(); count];
    for i in order {
        let std::cmp::Reverse((load, target)) = loads.pop().expect("at least one shard");
        loads.push(std::cmp::Reverse((load + files[i].1, target)));
        shards[target].push(i);
    }
    for shard in &mut shards {
        shard.sort_by(|a, b| files[*a].0.cmp(files[*b].0));
    }
    shards
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_or_say_why_not() {
        assert_eq!(
            "3/4".parse::<ShardSpec>().unwrap(),
            ShardSpec { index: 3, count: 4 }
        );
        for bad in ["3/2", "0/0", "-1/4", "a/b", "1", "/4", "1/", "+1/4", "4/4"] {
            assert!(bad.parse::<ShardSpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn shards_are_disjoint_complete_deterministic_and_balanced() {
        let sizes: Vec<u64> = (0..500u64).map(|i| (i * 7919) % 10_007 + 1).collect();
        let names: Vec<String> = (0..500).map(|i| format!("f{i:04}")).collect();
        let files: Vec<(&str, u64)> = names.iter().map(String::as_str).zip(sizes).collect();
        assert_eq!(
            assign(&files[..3], u32::MAX).len(),
            3,
            "never more shards than files"
        );
        for count in [1, 2, 3, 7, 64] {
            let shards = assign(&files, count);
            let mut seen: Vec<usize> = shards.iter().flatten().copied().collect();
            seen.sort();
            assert_eq!(seen, (0..files.len()).collect::<Vec<_>>());
            let total: u64 = files.iter().map(|f| f.1).sum();
            let largest = files.iter().map(|f| f.1).max().unwrap();
            for shard in &shards {
                let bytes: u64 = shard.iter().map(|i| files[*i].1).sum();
                assert!(bytes <= total / u64::from(count) + largest, "{bytes}");
            }
            // The listing order does not matter.
            let mut reversed = files.clone();
            reversed.reverse();
            let again = assign(&reversed, count);
            let paths = |s: &Vec<Vec<usize>>, f: &[(&str, u64)]| -> Vec<Vec<String>> {
                s.iter()
                    .map(|v| v.iter().map(|i| f[*i].0.to_string()).collect())
                    .collect()
            };
            assert_eq!(paths(&shards, &files), paths(&again, &reversed));
        }
    }
}
