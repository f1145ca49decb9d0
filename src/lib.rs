//! The `dsv` command line (crate `dsv-cli`): clap definitions (their doc comments are the
//! `--help` text), dispatch to one module per command, and human rendering of the library's
//! reports. A front end of the `dsv` library: the `dsv` binary and the Python package's `dsv`
//! command both call [`run`]. It prints, reads the environment and installs a Ctrl-C handler,
//! which the library never does. `dsv mount` comes from the `dsv-mount` crate (feature
//! `mount`, on by default).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// The revision syntax (`crates/dsv-store/src/revision.rs`) for the help of every revision argument, so that
/// each spells it the same way: `help = concat!("The revision: ", revision_syntax!())`.
macro_rules! revision_syntax {
    () => {
        "NAME (its latest version), NAME@TAG, NAME@latest (or NAME@HEAD), NAME@<id prefix, 4+ hex digits>, or \
         any of these followed by ~N or ^ (N versions back, one back: NAME@v2~1, NAME@HEAD^)"
    };
}

mod commands;
mod error;
mod render;
mod ui;

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use commands::audit::{AuditArgs, LockArgs};
use commands::cache::CacheCommand;
use commands::cat::CatArgs;
use commands::checkout::CheckoutArgs;
use commands::commit::CommitArgs;
use commands::config::ConfigCommand;
use commands::docs::{CompletionsArgs, ManArgs};
use commands::export::ExportArgs;
use commands::gc::{GcArgs, RmArgs};
use commands::import::{ImportArgs, UpdateArgs};
use commands::init::InitArgs;
use commands::inspect::{DiffArgs, LogArgs, LsArgs, ShowArgs};
#[cfg(feature = "mount")]
use commands::mount::MountArgs;
use commands::pin::{PinArgs, UnpinArgs};
use commands::remote::RemoteCommand;
use commands::reset::{RenameArgs, ResetArgs};
use commands::shards::ShardsArgs;
use commands::status::StatusArgs;
use commands::sync::{CloneArgs, CopyArgs, FetchArgs, PullArgs, PushArgs, RebaseArgs};
use commands::tag::TagArgs;
use commands::verify::VerifyArgs;
use commands::workspace::WorkspaceCommand;
use ui::Ui;

/// What `dsv --version` says after the name: the package version, then the commit and the
/// UTC date of the build (`0.2.0 (3f2a9c1d0b7e 2026-11-26)`; `unknown` for a commit when the
/// source was not a git checkout). Set by `build.rs`.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("DSV_COMMIT"),
    " ",
    env!("DSV_BUILD_DATE"),
    ")"
);

/// The `--help` heading of the options every command takes.
const GLOBAL: &str = "Global options";

/// dsv — content-addressed dataset versioning: `git commit` / `git checkout` for datasets.
#[derive(Debug, Parser)]
#[command(name = "dsv", version = VERSION, about, long_about = None, propagate_version = true)]
struct Cli {
    /// The store to use (a `.dsv` directory or the directory holding one); default: the
    /// nearest `.dsv` in the current directory or its parents.
    #[arg(long, global = true, help_heading = GLOBAL, env = "DSV_STORE", value_name = "PATH")]
    store: Option<PathBuf>,
    /// Print machine-readable JSON on stdout instead of text.
    #[arg(long, global = true, help_heading = GLOBAL)]
    json: bool,
    /// Print nothing but errors.
    #[arg(short, long, global = true, help_heading = GLOBAL)]
    quiet: bool,
    /// Never draw progress bars (they are only drawn on a terminal anyway).
    #[arg(long, global = true, help_heading = GLOBAL)]
    no_progress: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create a store (`.dsv/`) in DIR (default: the current directory).
    ///
    /// Examples:
    ///   dsv init                  # .dsv/ in the current directory
    ///   dsv init /data/project    # /data/project/.dsv, found from anywhere below /data/project
    #[command(verbatim_doc_comment)]
    Init(InitArgs),
    /// Snapshot a directory as a new version of a dataset; prints the version id.
    ///
    /// Inside a workspace (its root or any directory in it) no arguments are needed: the
    /// directory and the dataset come from the workspace. The new version's parent is the
    /// version the workspace holds (as git's HEAD), and the dataset's head moves to it.
    ///
    /// Examples:
    ///   dsv commit ./mnist -d mnist -m "first import"   # a new dataset
    ///   cd ./mnist && dsv commit -m "fix labels"        # inside the workspace
    ///   dsv commit -t v2                                # and tag the new version
    ///   dsv commit --no-deltas                          # store every new chunk whole
    #[command(verbatim_doc_comment)]
    Commit(CommitArgs),
    /// Materialize a version into DIR (created if missing), writing only what differs.
    ///
    /// With --shard, --include or --files-from, a partial checkout: only the selected files
    /// (and the directories on their paths) are fetched and written, into a directory that
    /// is not a workspace; no workspace is recorded.
    ///
    /// Examples:
    ///   dsv checkout mnist@v3 /scratch/mnist
    ///   dsv checkout origin/mnist@v3 /scratch/mnist     # from a remote, fetching what is missing
    ///   dsv checkout mnist@v3 /scratch/part --shard 2/8 # worker 2 of 8's files only
    ///   dsv checkout mnist@v3 /scratch/train --include 'train/**'
    #[command(verbatim_doc_comment)]
    Checkout(CheckoutArgs),
    /// Import a version from object storage, a URL or a local path: one object (an archive
    /// is expanded), or every object under a prefix. Each file's source, ETag, VersionId,
    /// Last-Modified and size are recorded (`dsv show REV --provenance`).
    ///
    /// Examples:
    ///   dsv import s3://datasets/mnist.zip --tag v1            # expanded, as dataset mnist
    ///   dsv import s3://datasets/imagenet/val/ -d imagenet-val # every object under the prefix
    ///   dsv import https://example.com/mnist.tar.gz --etag '"5d41402abc4b2a76"'
    ///   dsv import ./mnist.zip --no-extract                    # the archive itself, one file
    ///   dsv import https://example.com/big.tar --max-bytes 200GB --stall-timeout 5m --timeout 6h
    #[command(verbatim_doc_comment)]
    Import(ImportArgs),
    /// Re-check the source an imported dataset came from: download only the objects that
    /// changed, and record a new version only if something did.
    ///
    /// Examples:
    ///   dsv update mnist
    ///   dsv update imagenet-val -m "upstream relabeling" --jobs 32
    #[command(verbatim_doc_comment)]
    Update(UpdateArgs),
    /// Show what changed in a workspace since the version it holds (default: the workspace
    /// holding the current directory).
    ///
    /// Examples:
    ///   dsv status
    ///   dsv status /scratch/mnist --exit-code   # exit 1 when something changed
    #[command(verbatim_doc_comment)]
    Status(StatusArgs),
    /// Show what changed between two versions (or a version and its parent).
    ///
    /// Examples:
    ///   dsv diff mnist                  # the head against its parent
    ///   dsv diff mnist@v1 mnist@v2 --stat
    ///   dsv diff mnist@v1 mnist --exit-code --json
    #[command(verbatim_doc_comment)]
    Diff(DiffArgs),
    /// List a dataset's versions: the head and its ancestors, newest first, then versions
    /// on other lines (left by `dsv reset`, or fetched from a remote).
    ///
    /// Examples:
    ///   dsv log mnist
    ///   dsv log mnist --oneline -n 5
    ///   dsv log mnist@v1              # v1 and its ancestors
    #[command(verbatim_doc_comment)]
    Log(LogArgs),
    /// List datasets, or the files of a version (`REV` or `REV:PATH`).
    ///
    /// Examples:
    ///   dsv ls                    # the datasets
    ///   dsv ls mnist@v3           # every file of a version
    ///   dsv ls mnist@v3:train     # the files under train/
    #[command(verbatim_doc_comment)]
    Ls(LsArgs),
    /// Show one version: id, parent, tags, counts, bytes, source.
    ///
    /// Examples:
    ///   dsv show mnist@v3
    ///   dsv show mnist@latest~1 --json
    ///   dsv show mnist --provenance   # where each imported file came from
    #[command(verbatim_doc_comment)]
    Show(ShowArgs),
    /// Give a version a name (a tag), list the tags, or delete one.
    ///
    /// Examples:
    ///   dsv tag mnist v1                # tag the head
    ///   dsv tag mnist@3f2a9c v0 --force # move a tag
    ///   dsv tag --list mnist
    ///   dsv tag -d mnist@v0
    ///   dsv tag -d --remote origin mnist@v0   # delete the tag on the remote
    #[command(verbatim_doc_comment)]
    Tag(TagArgs),
    /// Move a dataset's local head to another of its versions (as `git reset` moves a
    /// branch): nothing is deleted, and the line the head leaves stays in `dsv log`.
    ///
    /// Examples:
    ///   dsv reset mnist v1               # back to the tagged version
    ///   dsv reset mnist latest~2
    ///   dsv reset mnist 3f2a9c0d         # to a version fetched from a remote
    #[command(verbatim_doc_comment)]
    Reset(ResetArgs),
    /// Rename a dataset: its versions, head, tags and workspaces follow.
    ///
    /// Examples:
    ///   dsv rename mnsit mnist
    #[command(verbatim_doc_comment)]
    Rename(RenameArgs),
    /// Write a version (or a shard or subset of it) as a tar stream: to stdout, a file or a
    /// FIFO (SageMaker's Pipe mode).
    ///
    /// The stream is deterministic (paths in order, owner 0:0, modes 0644/0755, times the
    /// version's), so one version always gives the same bytes. It starts before the whole
    /// version is fetched: a version whose data is on a remote is read file by file, and
    /// what is read is kept in the store. A closed pipe ends it quietly.
    ///
    /// Examples:
    ///   dsv export mnist@v3 | tar -x -C /scratch/mnist
    ///   dsv export mnist@v3 --shard 1/8 --include 'train/**' -o shard1.tar
    #[command(verbatim_doc_comment)]
    Export(ExportArgs),
    /// Mount a version (or a shard or subset of it) as a read-only file system (FUSE), in
    /// the foreground, until Ctrl-C, SIGTERM or `fusermount3 -u MOUNTPOINT`.
    ///
    /// Mounting reads no data, whatever the version's size; a file's data is read when it
    /// is read (fetched from a remote on its first read and kept in the store). A version
    /// never changes, so the kernel's page cache keeps what was read across opens: a second
    /// epoch reads from memory. As root on Linux 6.9+, a file read whole once is copied into
    /// the store's tmp/ and then read by the kernel directly (FUSE passthrough), as fast as
    /// a checkout. Needs FUSE 3 (`/dev/fuse` and `fusermount3`); without it, `dsv export`
    /// streams the same files.
    ///
    /// Examples:
    ///   dsv mount mnist@v3 /mnt/mnist
    ///   dsv mount mnist@v3 /mnt/shard --shard 1/8 --include 'train/**'
    ///   dsv mount mnist@v3 /mnt/mnist --cache-size 2GiB --passthrough-cache 20GiB
    #[command(verbatim_doc_comment)]
    #[cfg(feature = "mount")]
    Mount(MountArgs),
    /// Print which files each of N shards holds (`--shard I/N` on export): deterministic,
    /// balanced by bytes, the same on every machine.
    ///
    /// Examples:
    ///   dsv shards mnist@v3 8
    ///   dsv shards mnist@v3 8 --include 'train/**' --json
    #[command(verbatim_doc_comment)]
    Shards(ShardsArgs),
    /// Write one file of a version to stdout.
    ///
    /// Examples:
    ///   dsv cat mnist@v1:labels.csv | head
    ///   dsv cat mnist:train/0001.png --range 0..16 | xxd
    #[command(verbatim_doc_comment)]
    Cat(CatArgs),
    /// Rebuild a lost or damaged catalog from the packs and the ref log.
    ///
    /// Every object, tree and version is indexed again from the packs (each checked against
    /// its name), and every head, tag, remote, pin and removal is restored from the ref log
    /// (`.dsv/reflog`), which every commit writes before its catalog transaction. The old
    /// catalog is kept aside as `catalog.db.before-repair-<time>`; nothing is deleted.
    /// Workspace records are not rebuilt (the next commit or status hashes files again),
    /// nor what the store knew of its remotes' contents (`dsv fetch` reads it again).
    ///
    /// Examples:
    ///   dsv repair
    ///   dsv --store /data/.dsv repair --json
    #[command(verbatim_doc_comment)]
    Repair,
    /// Check every pack, object, tree and version of the store; report, never fix.
    ///
    /// Examples:
    ///   dsv verify
    ///   dsv verify --full   # also reassemble every file and check its id
    ///   dsv verify --remote origin --full   # a remote's refs and every byte of its packs
    #[command(verbatim_doc_comment)]
    Verify(VerifyArgs),
    /// Check that DIR is bit-identical to a version (by default the one it was last
    /// committed or checked out as), or prove a training run's lineage record; exit 0 only
    /// when it is (proven), 1 when it differs.
    ///
    /// Examples:
    ///   dsv audit data/                            # against the version data/ holds
    ///   dsv audit data/ --against mnist@v3 --full  # re-hashing every file
    ///   dsv audit runs/42 --lock dsv.lock          # runs/42/NAME for each pinned version
    ///   dsv audit --lineage dsv-lineage.json       # the version, selection and samples a run read
    #[command(verbatim_doc_comment)]
    Audit(AuditArgs),
    /// Pin exact versions in a lock file, written as JSON to stdout.
    ///
    /// Examples:
    ///   dsv lock mnist@v1 cifar > dsv.lock
    ///   dsv checkout --lock dsv.lock data/   # data/mnist and data/cifar, exactly those versions
    #[command(verbatim_doc_comment)]
    Lock(LockArgs),
    /// The local cache of versions: what each costs here, and bounded eviction.
    ///
    /// Examples:
    ///   dsv cache ls
    ///   dsv cache prune --max-size 50GB --dry-run
    #[command(subcommand, verbatim_doc_comment)]
    Cache(CacheCommand),
    /// The directories this store committed from or checked out into (workspaces); each
    /// holds its version from `rm` and cleanup until it is deleted or forgotten.
    ///
    /// Examples:
    ///   dsv workspace ls
    ///   dsv workspace forget /scratch/old-run
    #[command(subcommand, verbatim_doc_comment)]
    Workspace(WorkspaceCommand),
    /// Delete what no remaining version reaches (after `rm`), repacking packs that are
    /// mostly garbage; `--dry-run` prints the plan only.
    ///
    /// Examples:
    ///   dsv gc --dry-run
    ///   dsv rm mnist@v1 && dsv gc
    ///   dsv gc --grace 10m   # also unnamed packs older than 10 minutes
    ///   dsv gc --aggressive  # also store chunks kept whole as deltas against look-alikes
    ///   dsv gc --remote origin --dry-run   # what a remote's collection would mark and delete
    ///   dsv rm --remote origin scratch-run && dsv gc --remote origin
    #[command(verbatim_doc_comment)]
    Gc(GcArgs),
    /// Remove a version's data (NAME@REV) or a whole dataset's (NAME); the log keeps the
    /// versions, marked removed; `gc` frees the space. A dataset whose versions are all
    /// removed is no longer listed by `dsv ls`.
    ///
    /// Examples:
    ///   dsv rm mnist@v0
    ///   dsv rm mnist@latest~3 --force   # also drop its tags
    ///   dsv rm scratch-run && dsv gc
    ///   dsv rm --remote origin scratch-run   # its head and tags on the remote
    #[command(verbatim_doc_comment)]
    Rm(RmArgs),
    /// Keep a version from removal (a job's lease: `--until`).
    ///
    /// Examples:
    ///   dsv pin mnist@v3 --reason "paper, table 2"
    ///   dsv pin mnist@latest --until 7d --reason "training run 42"
    #[command(verbatim_doc_comment)]
    Pin(PinArgs),
    /// Lift a pin.
    ///
    /// Examples:
    ///   dsv unpin mnist@v3
    #[command(verbatim_doc_comment)]
    Unpin(UnpinArgs),
    /// List the pins.
    ///
    /// Examples:
    ///   dsv pins
    ///   dsv pins --json
    #[command(verbatim_doc_comment)]
    Pins,
    /// Manage remotes: object storage (s3://, gs://, az://, file://) holding packs and refs.
    ///
    /// Examples:
    ///   dsv remote add origin s3://my-bucket/datasets --option aws_region=eu-west-1
    ///   dsv remote ls
    #[command(subcommand, verbatim_doc_comment)]
    Remote(RemoteCommand),
    /// Upload what a remote lacks for each dataset's head (or NAME[@REV]), then move the
    /// remote's heads (fast-forward only) and create its tags.
    ///
    /// Each dataset is pushed on its own: one refused (behind the remote, or diverged from
    /// it) leaves the others pushed, and push exits 4 after its report.
    ///
    /// Examples:
    ///   dsv push                          # every dataset's head, to origin
    ///   dsv push mnist cifar --remote backup
    ///   dsv push mnist@v1 --force         # move the remote's head back to v1
    #[command(verbatim_doc_comment)]
    Push(PushArgs),
    /// Copy versions from one remote to another, with no local copy of their data.
    ///
    /// The destination receives what it lacks (a server-side copy within one bucket, else
    /// streamed and checked in flight), then its heads and tags move as push moves them.
    /// Run it again after an interruption: only what is still missing moves.
    ///
    /// Examples:
    ///   dsv copy mnist --from far --to near          # the head, its history and tags
    ///   dsv copy mnist@v3 imagenet --from s3-us --to az-eu --jobs 32
    ///   dsv copy mnist --from far --to near --json
    ///   dsv copy mnist --from far --to near --dry-run   # what would move; nothing written
    #[command(verbatim_doc_comment)]
    Copy(CopyArgs),
    /// Download a dataset's version (default: the remote's head) and what it needs; move the
    /// local head to it when that is a fast-forward.
    ///
    /// When both sides have new versions, the local head is kept; with --rebase the local
    /// versions are replayed onto the remote's (as `dsv rebase REMOTE/NAME`) when the two
    /// sides changed different paths, so `dsv push` then succeeds. A workspace holding the
    /// current directory and the old head is checked out at the new head when it has no
    /// uncommitted changes (left alone, and said so, when it has).
    ///
    /// Examples:
    ///   dsv pull mnist
    ///   dsv pull mnist@v3 --include 'train/**'
    ///   cd mnist && dsv pull --rebase && dsv push   # the workspace's dataset
    ///   dsv pull mnist --dry-run                      # what a pull would do; nothing changes
    ///   dsv pull mnist --rebase --dry-run
    #[command(verbatim_doc_comment)]
    Pull(PullArgs),
    /// Replay a dataset's local versions onto ONTO (a remote's head, or any version).
    ///
    /// The versions since the common ancestor are replayed one by one, each making a new
    /// version (same message and author, new time) whose parent chain starts at ONTO; the
    /// head moves to the last. ONTO's line is kept whole.
    ///
    /// Works when the two lines changed different paths. A path changed on both sides (to
    /// different content, or deleted on one and changed on the other, or a file on one
    /// side where the other has entries below it) is a conflict: all are listed, the exit
    /// code is 4, and nothing is changed. A workspace holding the current directory and the
    /// old head follows the head when it has no uncommitted changes.
    ///
    /// Examples:
    ///   dsv rebase origin/mnist           # as `dsv pull mnist --rebase`
    ///   dsv rebase mnist@v3 --dry-run
    ///   dsv rebase mnist -d mnist-exp     # mnist-exp's versions onto mnist's head
    #[command(verbatim_doc_comment)]
    Rebase(RebaseArgs),
    /// Refresh a remote's refs and metadata (versions, trees; no file data).
    ///
    /// Examples:
    ///   dsv fetch
    ///   dsv fetch --remote backup
    #[command(verbatim_doc_comment)]
    Fetch(FetchArgs),
    /// Create a store from a remote: its datasets, heads and tags; data is fetched when
    /// first needed (by checkout or pull).
    ///
    /// Examples:
    ///   dsv clone s3://my-bucket/datasets          # into ./datasets
    ///   dsv clone file:///mnt/nfs/dsv /data/dsv && cd /data/dsv && dsv checkout mnist@v3 mnist
    #[command(verbatim_doc_comment)]
    Clone(CloneArgs),
    /// Print a shell completion script to stdout.
    ///
    /// Examples:
    ///   dsv completions bash > /etc/bash_completion.d/dsv       # or ~/.local/share/bash-completion/completions/dsv
    ///   dsv completions zsh > "${fpath[1]}/_dsv"
    ///   dsv completions fish > ~/.config/fish/completions/dsv.fish
    ///   dsv completions powershell >> $PROFILE
    #[command(verbatim_doc_comment)]
    Completions(CompletionsArgs),
    /// Write man pages into DIR (created if missing): dsv.1, and dsv-COMMAND.1 for every
    /// command and subcommand (dsv-commit.1, dsv-cache-ls.1, ...).
    ///
    /// Examples:
    ///   dsv man --out /usr/local/share/man/man1 && man dsv-commit
    ///   dsv man --out ~/.local/share/man/man1
    #[command(verbatim_doc_comment)]
    Man(ManArgs),
    /// Read and change the store's settings (`.dsv/config.toml`): defaults for flags.
    ///
    /// A flag on the command line wins over a setting, and a setting over the built-in
    /// default. The file is TOML; an unknown key or a bad value in it is an error naming
    /// the line.
    ///
    /// Settings:
    ///   core.compression_level  zstd level of commit and import, 1-19 (built-in: 3)
    ///   core.jobs               --jobs of commit, import, checkout, status, audit, push,
    ///                           pull, fetch, 1-256 (built-in: per command)
    ///   core.deltas             false: commit, import and update store every chunk whole,
    ///                           as their --no-deltas; gc still stores older versions as
    ///                           deltas (built-in: true)
    ///   remote.default          the remote of push, pull and fetch without --remote
    ///                           (built-in: the only remote, else origin)
    ///
    /// Examples:
    ///   dsv config set core.compression_level 9
    ///   dsv config set remote.default backup
    ///   dsv config get core.jobs          # exit 1 when not set
    ///   dsv config list --json
    ///   dsv config unset core.jobs
    #[command(subcommand, verbatim_doc_comment)]
    Config(ConfigCommand),
}

/// Which files of a version a command reads.
#[derive(Debug, clap::Args)]
struct SelectArgs {
    /// Only worker I of N's shard (I counts from 0): deterministic, balanced by bytes.
    #[arg(long, value_name = "I/N", allow_hyphen_values = true)]
    shard: Option<String>,
    /// Only files matching GLOB (repeatable), e.g. 'train/**'.
    #[arg(long, value_name = "GLOB")]
    include: Vec<String>,
    /// Only the files listed in LIST, one path per line (a manifest); an unknown path is
    /// an error naming it.
    #[arg(long, value_name = "LIST")]
    files_from: Option<PathBuf>,
}

impl SelectArgs {
    fn selection(&self) -> anyhow::Result<dsv::read::Selection> {
        let mut selection = dsv::read::Selection::default();
        selection.include = self.include.clone();
        selection.files_from = self
            .files_from
            .as_deref()
            .map(commands::read_list)
            .transpose()?;
        selection.shard = self.shard.as_deref().map(str::parse).transpose()?;
        Ok(selection)
    }
}

#[derive(Debug, Args)]
struct RemoteArg {
    /// The remote (default: origin, or the only remote).
    #[arg(long = "remote", value_name = "NAME")]
    name: Option<String>,
}

#[derive(Debug, Args)]
struct JobsArg {
    /// Parallel workers or requests in flight, 1 to 256 (default: a sensible number for this
    /// machine).
    #[arg(short, long, value_name = "N", value_parser = jobs_range())]
    jobs: Option<usize>,
}

/// Who commits when no author is given, as the CLI decides it from the environment (the
/// first of `DSV_AUTHOR`, `$USER@host`, git's `user.name <user.email>`, the uid's account
/// name at the host, `unknown@host`); the Python package's `Store.commit` uses it too.
pub use commands::default_author;

/// Runs the command line `args` (the program name first, as `std::env::args_os` gives it)
/// and returns the exit status (the table in docs/cli.md). Prints to stdout and stderr, reads
/// the environment (`DSV_STORE`, `DSV_LOG`, AWS settings), and on its first call in a process
/// installs a Ctrl-C/SIGTERM handler that cancels the running operation (a second signal
/// exits the process): meant for a process that runs one command, as the `dsv` binary and the
/// Python package's `dsv` script do.
pub fn run<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    // `dsv __reference` prints docs/cli.md's generated blocks (for tests/it/cli_docs.rs). It
    // is no clap subcommand, not even a hidden one, which completions would still offer.
    if args.get(1).is_some_and(|arg| arg == "__reference") {
        return match commands::docs::reference() {
            Ok(code) => code,
            Err(e) => {
                eprintln!("error: {e}");
                error::exit_code(&e)
            }
        };
    }
    // Every message this run prints, clap's included, is redacted of the arguments' secrets:
    // a URL with a password may be echoed whole, cut, or taken for a path.
    *ARGUMENT_SECRETS.lock().unwrap_or_else(|e| e.into_inner()) = args
        .iter()
        .flat_map(|arg| dsv::redact::argument_secrets(&arg.to_string_lossy()))
        .collect();
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            let _ = write!(
                std::io::stderr().lock(),
                "{}",
                redact_message(&e.render().to_string())
            );
            return error::USAGE;
        }
        Err(e) => {
            // `--help`, `--version`: no argument is echoed.
            let _ = e.print();
            return error::SUCCESS;
        }
    };
    // Already set when called a second time in one process: the first one stays.
    // Log output (a dependency's debug events name URLs) is redacted as every message is.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("DSV_LOG"))
        .with_writer(|| RedactedStderr)
        .with_ansi(ui::color_on_stderr())
        .try_init();
    // The first Ctrl-C asks the running operation to stop at a consistent point; a second
    // one exits at once (the store stays consistent either way: see docs/architecture.md,
    // "Invariants").
    let token = dsv::interrupt::CancelToken::new();
    let handler_token = token.clone();
    let _ = ctrlc::set_handler(move || {
        if handler_token.is_cancelled() {
            std::process::exit(i32::from(error::INTERRUPTED));
        }
        handler_token.cancel();
    });
    let ui = Ui::new(cli.json, cli.quiet, cli.no_progress);
    // The memory a download keeps to check delta frames (the library reads no environment).
    if let Some(text) = std::env::var_os("DSV_DELTA_MEMORY").filter(|v| !v.is_empty()) {
        match parse_size(&text.to_string_lossy()) {
            Ok(bytes) => dsv::transfer::set_delta_memory(bytes),
            Err(e) => {
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "error: DSV_DELTA_MEMORY: {e} (set it to a size such as 256MiB, or unset it)"
                );
                return error::USAGE;
            }
        }
    }
    commands::use_aws_profile_from_environment();
    let outcome = token.run(|| dispatch(&cli, &ui));
    warn_fallbacks(dsv::transfer::fallback::take_fallbacks());
    match outcome {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => error::SUCCESS,
        Err(e) => {
            report_error(&ui, &e);
            error::exit_code(&e)
        }
    }
}

/// Warns on stderr of each remote that failed while another served instead (once per
/// remote and process: [`dsv::transfer::fallback::take_fallbacks`]), URLs redacted. Called
/// by the progress bar as data arrives, and after every command for what is left.
pub(crate) fn warn_fallbacks(fallbacks: Vec<dsv::transfer::fallback::Fallback>) {
    let mut err = std::io::stderr().lock();
    for fallback in fallbacks {
        let _ = writeln!(
            err,
            "warning: remote {:?} failed, read from {:?} instead: {}",
            fallback.failed,
            fallback.served,
            redact_message(&fallback.error)
        );
    }
}

fn is_broken_pipe(error: &anyhow::Error) -> bool {
    let broken = Some(std::io::ErrorKind::BrokenPipe);
    error.chain().any(|e| {
        e.downcast_ref::<std::io::Error>().map(std::io::Error::kind) == broken
            || e.downcast_ref::<serde_json::Error>()
                .and_then(serde_json::Error::io_error_kind)
                == broken
    })
}

/// Standard error for log output, each write (the log writer writes one event at a time)
/// redacted by [`redact_message`].
struct RedactedStderr;

impl Write for RedactedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = redact_message(&String::from_utf8_lossy(buf));
        std::io::stderr().lock().write_all(text.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().lock().flush()
    }
}

/// The secrets of the running command's arguments (`dsv::redact::argument_secrets`).
static ARGUMENT_SECRETS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// `text` with every URL's password and signature redacted (`dsv::redact::text`), and every
/// secret of the command's arguments, however the message cut or quoted the argument.
pub(crate) fn redact_message(text: &str) -> String {
    let secrets = ARGUMENT_SECRETS.lock().unwrap_or_else(|e| e.into_inner());
    dsv::redact::with_secrets(text, &secrets)
}

/// Prints the error, its causes and hints, each redacted ([`redact_message`]: a cause from
/// the HTTP client or object_store names the URL as it was given, a usage error the
/// argument).
fn report_error(ui: &Ui, e: &anyhow::Error) {
    let redact =
        |texts: Vec<String>| -> Vec<String> { texts.iter().map(|t| redact_message(t)).collect() };
    let message = redact_message(&e.to_string());
    let causes = redact(error::causes(e));
    let hints = redact(error::hints(e));
    if ui.json {
        let value = serde_json::json!({
            "error": { "kind": error::kind_name(e), "message": message, "causes": causes, "hints": hints }
        });
        let _ = ui.json(&value);
    }
    write_error(&message, causes, hints);
}

/// Prints a library error that a command exits with after its report (a rebase stopped by
/// conflicts): its message, causes and hints on stderr, redacted, as [`report_error`] does
/// (the report, not the error, is the `--json` output).
pub(crate) fn report_refusal(e: dsv::Error) {
    let e = anyhow::Error::new(e);
    let redact =
        |texts: Vec<String>| -> Vec<String> { texts.iter().map(|t| redact_message(t)).collect() };
    write_error(
        &redact_message(&e.to_string()),
        redact(error::causes(&e)),
        redact(error::hints(&e)),
    );
}

/// Writes `error: MESSAGE`, its causes and its hints on stderr.
fn write_error(message: &str, causes: Vec<String>, hints: Vec<String>) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "error: {message}");
    for cause in causes {
        let _ = writeln!(err, "  caused by: {cause}");
    }
    for hint in hints {
        let _ = writeln!(err, "\nhint: {hint}");
    }
}

/// `--jobs` accepts `1..=MAX_JOBS`: more threads than that only contend, and a huge count
/// would exhaust the threads a process may start.
fn jobs_range() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(1..=dsv::parallel::MAX_JOBS as u64)
}

/// A size: bytes, or a number with KB/MB/GB/TB (powers of 1000) or KiB/MiB/GiB/TiB.
fn parse_size(text: &str) -> Result<u64, String> {
    dsv::ops::cache::parse_size(text)
}

fn dispatch(cli: &Cli, ui: &Ui) -> anyhow::Result<u8> {
    use commands::*;
    match &cli.command {
        Command::Init(args) => init::run(cli, ui, args),
        Command::Commit(args) => commit::run(cli, ui, args),
        Command::Checkout(args) => checkout::run(cli, ui, args),
        Command::Import(args) => import::import(cli, ui, args),
        Command::Update(args) => import::update(cli, ui, args),
        Command::Status(args) => status::run(cli, ui, args),
        Command::Diff(args) => inspect::diff(cli, ui, args),
        Command::Log(args) => inspect::log(cli, ui, args),
        Command::Ls(args) => inspect::ls(cli, ui, args),
        Command::Show(args) => inspect::show(cli, ui, args),
        Command::Tag(args) => tag::run(cli, ui, args),
        Command::Reset(args) => reset::reset(cli, ui, args),
        Command::Rename(args) => reset::rename(cli, ui, args),
        Command::Export(args) => export::run(cli, ui, args),
        #[cfg(feature = "mount")]
        Command::Mount(args) => mount::run(cli, ui, args),
        Command::Shards(args) => shards::run(cli, ui, args),
        Command::Cat(args) => cat::run(cli, args),
        Command::Repair => repair::run(cli, ui),
        Command::Verify(args) => verify::run(cli, ui, args),
        Command::Audit(args) => audit::audit(cli, ui, args),
        Command::Lock(args) => audit::lock(cli, ui, args),
        Command::Cache(command) => cache::run(cli, ui, command),
        Command::Workspace(command) => workspace::run(cli, ui, command),
        Command::Gc(args) => gc::gc(cli, ui, args),
        Command::Rm(args) => gc::rm(cli, ui, args),
        Command::Pin(args) => pin::pin(cli, ui, args),
        Command::Unpin(args) => pin::unpin(cli, ui, args),
        Command::Pins => pin::pins(cli, ui),
        Command::Remote(command) => remote::run(cli, ui, command),
        Command::Push(args) => sync::push(cli, ui, args),
        Command::Copy(args) => sync::copy(cli, ui, args),
        Command::Pull(args) => sync::pull(cli, ui, args),
        Command::Rebase(args) => sync::rebase(cli, ui, args),
        Command::Fetch(args) => sync::fetch(cli, ui, args),
        Command::Clone(args) => sync::clone(ui, args),
        Command::Completions(args) => docs::completions(args),
        Command::Man(args) => docs::man(ui, args),
        Command::Config(command) => config::run(cli, ui, command),
    }
}
