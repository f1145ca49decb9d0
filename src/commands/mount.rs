//! `dsv mount`: a version as a read-only FUSE file system, in the foreground.

use std::path::PathBuf;

use clap::Args;

use super::open_store;
use crate::{Cli, SelectArgs, error, parse_size, render, ui::Ui};

/// The smallest `--cache-size`: the engine reads up to 8 MiB ahead of a sequential reader
/// into the cache, so a smaller one would drop frames before they are read.
const MIN_CACHE_BYTES: u64 = 16 * 1024 * 1024;

#[derive(Debug, Args)]
pub(crate) struct MountArgs {
    #[arg(help = concat!("The revision: ", revision_syntax!()))]
    revision: String,
    /// An existing, empty directory to mount on.
    mountpoint: PathBuf,
    #[command(flatten)]
    select: SelectArgs,
    /// Threads serving file system requests.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: u16,
    /// Memory for decompressed data, shared by every file of the mount (e.g. 1GiB, 512MB;
    /// default 256MiB; at least 16MiB, at most the machine's memory). It serves reads the
    /// kernel's page cache no longer holds and a sequential reader's read-ahead; a file read
    /// again whole is served by the page cache, which this does not limit.
    #[arg(long, value_name = "SIZE", value_parser = parse_cache_size)]
    cache_size: Option<u64>,
    /// Disk for passthrough copies (e.g. 20GiB; default a tenth of the free space of the
    /// store's disk, at most 64GiB; never more than half of it; 0 turns passthrough off).
    /// A file read whole once through
    /// the mount is copied into the store's tmp/ and then read by the kernel directly, at
    /// the speed of a local file (FUSE passthrough: Linux 6.9+, as root); the least
    /// recently opened copies make room. Removed at unmount.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    passthrough_cache: Option<u64>,
    /// Serve every read through dsv (no passthrough copies), as on kernels without
    /// passthrough.
    #[arg(long)]
    no_passthrough: bool,
}

/// `--cache-size`: a size ([`parse_size`]) from [`MIN_CACHE_BYTES`] to the machine's memory.
fn parse_cache_size(text: &str) -> Result<u64, String> {
    let bytes = parse_size(text)?;
    if bytes < MIN_CACHE_BYTES {
        return Err(format!("{text:?} is less than the smallest cache, 16MiB"));
    }
    if let Some(memory) = memory_bytes()
        && bytes > memory
    {
        return Err(format!(
            "{text:?} is more than this machine's memory ({})",
            indicatif::HumanBytes(memory)
        ));
    }
    Ok(bytes)
}

/// The machine's memory (`MemTotal` in `/proc/meminfo`); `None` where that cannot be read.
fn memory_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

pub(crate) fn run(cli: &Cli, ui: &Ui, args: &MountArgs) -> anyhow::Result<u8> {
    let selection = args.select.selection()?;
    let mut read_options = dsv::read::ReadOptions::default();
    if let Some(bytes) = args.cache_size {
        read_options.cache_bytes = bytes;
    }
    let engine = dsv::read::ReadEngine::new(open_store(cli)?, read_options);
    let mut options = dsv_mount::MountOptions::default();
    options.threads = usize::from(args.threads);
    options.passthrough = !args.no_passthrough;
    options.passthrough_cache_bytes = args.passthrough_cache;
    let mut shown = Ok(());
    let info = dsv_mount::mount(
        &engine,
        &args.revision,
        &selection,
        &args.mountpoint,
        &options,
        &mut |info| shown = ui.report(info, render::mounted),
    )?;
    shown?;
    if !ui.json {
        ui.line(format!("Unmounted {}", info.mountpoint.display()))?;
    }
    Ok(error::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_default_cache_size_is_the_engines() {
        // `--cache-size`'s help says "default 256MiB".
        assert_eq!(
            dsv::read::ReadOptions::default().cache_bytes,
            256 * 1024 * 1024
        );
    }

    #[test]
    fn cache_sizes_are_parsed_and_bounded() {
        assert_eq!(parse_cache_size("16MiB"), Ok(MIN_CACHE_BYTES));
        assert_eq!(parse_cache_size("1GiB"), Ok(1 << 30));
        assert!(parse_cache_size("1MiB").unwrap_err().contains("16MiB"));
        assert!(parse_cache_size("lots").unwrap_err().contains("not a size"));
        if memory_bytes().is_some() {
            assert!(parse_cache_size("1000TB").unwrap_err().contains("memory"));
        }
    }
}
