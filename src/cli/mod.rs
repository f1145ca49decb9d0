//! The command-line interface: clap definitions (their doc comments are the `--help` text),
//! dispatch, and human rendering of the library's reports.

mod error;
mod render;
mod ui;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use dsv::ops::{
    audit, cache, checkout, commit, gc, import, ingest::IngestOptions, inspect, status, sync,
    verify,
};
use dsv::{Revision, Store};
use ui::Ui;

/// dsv — content-addressed dataset versioning: `git commit` / `git checkout` for datasets.
#[derive(Debug, Parser)]
#[command(name = "dsv", version, about, long_about = None, propagate_version = true)]
struct Cli {
    /// The store to use (a `.dsv` directory or the directory holding one); default: the
    /// nearest `.dsv` in the current directory or its parents.
    #[arg(long, global = true, env = "DSV_STORE", value_name = "PATH")]
    store: Option<PathBuf>,
    /// Print machine-readable JSON on stdout instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// Print nothing but errors.
    #[arg(short, long, global = true)]
    quiet: bool,
    /// Never draw progress bars (they are only drawn on a terminal anyway).
    #[arg(long, global = true)]
    no_progress: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create a store (`.dsv/`) in DIR (default: the current directory).
    Init {
        /// Where to create it.
        dir: Option<PathBuf>,
    },
    /// Snapshot DIR as a new version of a dataset; prints the version id.
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
    Import(ImportArgs),
    /// Re-check the source an imported dataset came from: download only the objects that
    /// changed, and record a new version only if something did.
    Update {
        /// The dataset.
        dataset: String,
        /// The message (default: "update from SOURCE").
        #[arg(short, long)]
        message: Option<String>,
        #[command(flatten)]
        settings: SourceArgs,
    },
    /// Show what changed in DIR since the version it holds.
    Status {
        /// The workspace directory.
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// Exit with 1 when DIR differs from its version.
        #[arg(long)]
        exit_code: bool,
        #[command(flatten)]
        jobs: JobsArg,
    },
    /// Show what changed between two versions (or a version and its parent).
    Diff {
        /// The older revision (or the only one: compared with its parent).
        old: String,
        /// The newer revision.
        new: Option<String>,
        /// Exit with 1 when they differ.
        #[arg(long)]
        exit_code: bool,
    },
    /// List a dataset's versions, newest first.
    Log {
        /// The dataset.
        dataset: String,
        /// Show at most N versions.
        #[arg(short = 'n', long, value_name = "N")]
        limit: Option<usize>,
    },
    /// List datasets, or the files of a version (`REV` or `REV:PATH`).
    Ls {
        /// What to list: nothing for datasets, `REV` or `REV:PATH` for files.
        target: Option<String>,
    },
    /// Show one version: id, parent, tags, counts, bytes, source.
    Show {
        /// The revision.
        revision: String,
        /// Also list where each file came from (imported versions): URL, archive member,
        /// ETag, VersionId, Last-Modified, size.
        #[arg(long)]
        provenance: bool,
    },
    /// Give a version a name.
    Tag {
        /// The revision to tag.
        revision: String,
        /// The tag.
        tag: String,
        /// Move the tag if it already names another version.
        #[arg(long)]
        force: bool,
    },
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
    Export {
        /// The revision: NAME, NAME@TAG, NAME@<id prefix>, NAME@latest~N.
        revision: String,
        /// The archive format.
        #[arg(long, value_enum, default_value = "tar")]
        format: ExportFormat,
        /// Where to write: a file, or `-` for stdout (the default).
        #[arg(short, long, value_name = "FILE|-", default_value = "-")]
        output: PathBuf,
        #[command(flatten)]
        select: SelectArgs,
    },
    /// Mount a version (or a shard or subset of it) as a read-only file system (FUSE), in the
    /// foreground, until Ctrl-C, SIGTERM or `fusermount3 -u MOUNTPOINT`.
    ///
    /// Mounting reads no data, whatever the version's size; a file's data is read when it
    /// is read (fetched from a remote on first open and kept in the store). Needs FUSE 3
    /// (`/dev/fuse` and `fusermount3`); without it, `dsv export` streams the same files.
    ///
    /// Examples:
    ///   dsv mount mnist@v3 /mnt/mnist
    ///   dsv mount mnist@v3 /mnt/shard --shard 1/8 --include 'train/**'
    #[command(verbatim_doc_comment)]
    Mount {
        /// The revision: NAME, NAME@TAG, NAME@<id prefix>, NAME@latest~N.
        revision: String,
        /// An existing, empty directory to mount on.
        mountpoint: PathBuf,
        #[command(flatten)]
        select: SelectArgs,
        /// Threads serving file system requests.
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
        threads: u16,
    },
    /// Print which files each of N shards holds (`--shard I/N` on export): deterministic,
    /// balanced by bytes, the same on every machine.
    ///
    /// Examples:
    ///   dsv shards mnist@v3 8
    ///   dsv shards mnist@v3 8 --include 'train/**' --json
    #[command(verbatim_doc_comment)]
    Shards {
        /// The revision.
        revision: String,
        /// How many shards.
        #[arg(value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        count: u32,
        /// Only files matching GLOB (repeatable).
        #[arg(long, value_name = "GLOB")]
        include: Vec<String>,
        /// Only the files listed in LIST (one path per line).
        #[arg(long, value_name = "LIST")]
        files_from: Option<PathBuf>,
    },
    /// Write one file of a version to stdout.
    Cat {
        /// `REV:PATH`.
        target: String,
        /// Only bytes START..END (END exclusive; either may be omitted).
        #[arg(long, value_name = "START..END")]
        range: Option<String>,
    },
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
    Repair,
    /// Check every pack, object, tree and version of the store; report, never fix.
    Verify {
        /// Also reassemble every file of every version and check it against its id.
        #[arg(long)]
        full: bool,
    },
    /// Check that DIR is bit-identical to a version (by default the one it was last committed
    /// or checked out as); exit 0 only when it is, 1 when it differs.
    Audit {
        /// The directory (with --lock: the directory holding DIR/NAME for each dataset).
        dir: PathBuf,
        /// Compare with this revision instead.
        #[arg(long, value_name = "REV", conflicts_with = "lock")]
        against: Option<String>,
        /// Compare DIR/NAME with each version this lock file pins.
        #[arg(long, value_name = "FILE")]
        lock: Option<PathBuf>,
        /// Re-hash every file instead of trusting the stat cache.
        #[arg(long)]
        full: bool,
        #[command(flatten)]
        jobs: JobsArg,
    },
    /// Pin exact versions in a lock file, written as JSON to stdout:
    /// `dsv lock mnist@v1 cifar > dsv.lock`.
    Lock {
        /// One revision per dataset.
        #[arg(required = true, value_name = "REVISION")]
        revisions: Vec<String>,
    },
    /// The local cache of versions: what each costs here, and bounded eviction.
    #[command(subcommand)]
    Cache(CacheCommand),
    /// The directories this store committed from or checked out into (workspaces); each holds
    /// its version from `rm` and cleanup until it is deleted or forgotten.
    #[command(subcommand)]
    Workspace(WorkspaceCommand),
    /// Delete what no remaining version reaches (after `rm`), repacking packs that are
    /// mostly garbage; `--dry-run` prints the plan only.
    Gc {
        /// Print what would be deleted and the bytes freed; delete nothing.
        #[arg(long)]
        dry_run: bool,
        /// Keep pack files the catalog does not name until they are this old.
        #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
        grace: std::time::Duration,
    },
    /// Remove a version's data (NAME@REV) or a whole dataset's (NAME); the log keeps the
    /// versions, marked removed; `gc` frees the space.
    Rm {
        /// NAME@REV or NAME.
        target: String,
        /// Also drop the tags of the versions removed.
        #[arg(long)]
        force: bool,
    },
    /// Keep a version from removal (a job's lease: `--until`).
    Pin {
        /// The revision.
        revision: String,
        /// Why (shown by `dsv pins`).
        #[arg(long, default_value = "")]
        reason: String,
        /// Until when: an RFC 3339 time (2026-12-01T00:00:00Z) or a duration from now (7d).
        #[arg(long, value_name = "TIME")]
        until: Option<String>,
    },
    /// Lift a pin.
    Unpin {
        /// The revision.
        revision: String,
    },
    /// List the pins.
    Pins,
    /// Manage remotes: object storage (s3://, gs://, az://, file://) holding packs and refs.
    #[command(subcommand)]
    Remote(RemoteCommand),
    /// Upload what a remote lacks for each dataset's head (or NAME[@REV]), then move the
    /// remote's heads (fast-forward only) and create its tags.
    Push {
        /// Push only this dataset's version (default: every dataset's head).
        revision: Option<String>,
        #[command(flatten)]
        remote: RemoteArg,
        /// Replace the remote's head (and tags) even when that drops versions from it.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        jobs: JobsArg,
    },
    /// Download a dataset's version (default: the remote's head) and what it needs; move the
    /// local head to it when that is a fast-forward.
    Pull {
        /// NAME or NAME@REV on the remote (a tag, an id prefix, `latest`).
        revision: String,
        #[command(flatten)]
        remote: RemoteArg,
        /// Only the files whose path matches GLOB (repeatable), e.g. 'train/**'.
        #[arg(long, value_name = "GLOB")]
        include: Vec<String>,
        #[command(flatten)]
        jobs: JobsArg,
    },
    /// Refresh a remote's refs and metadata (versions, trees; no file data).
    Fetch {
        #[command(flatten)]
        remote: RemoteArg,
        #[command(flatten)]
        jobs: JobsArg,
    },
    /// Create a store from a remote: its datasets, heads and tags; data is fetched when
    /// first needed (by checkout or pull).
    Clone {
        /// The remote's URL.
        url: String,
        /// Where to create the store (default: the URL's last path element).
        dir: Option<PathBuf>,
        /// A backend setting as KEY=VALUE (repeatable); credentials come from the environment.
        #[arg(long = "option", value_name = "KEY=VALUE")]
        options: Vec<String>,
        #[command(flatten)]
        jobs: JobsArg,
    },
}

/// The archive formats of `dsv export`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ExportFormat {
    /// POSIX tar (ustar with GNU long names).
    Tar,
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
        selection.files_from = self.files_from.as_deref().map(read_list).transpose()?;
        selection.shard = self.shard.as_deref().map(str::parse).transpose()?;
        Ok(selection)
    }
}

/// The paths of a manifest: one per line, blank lines and surrounding spaces ignored.
fn read_list(path: &std::path::Path) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the list {}", path.display()))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

#[derive(Debug, Subcommand)]
enum WorkspaceCommand {
    /// List workspaces: path, dataset, version, whether the directory still exists, when it
    /// was last committed or checked out.
    ///
    /// A record follows its directory (device and inode): a directory deleted and made again
    /// at the same path is not the old workspace, and shows as not existing.
    Ls,
    /// Forget a workspace (DIR need not exist): its version is no longer held by it, and its
    /// stat cache goes. The directory and its files are left as they are.
    ///
    /// Examples:
    ///   dsv workspace forget data/
    ///   dsv rm mnist@v1   # once no workspace holds it
    #[command(verbatim_doc_comment)]
    Forget {
        /// The directory.
        dir: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
enum CacheCommand {
    /// Per version: bytes only it holds here, bytes shared, last used, pinned, in use, on
    /// which remotes.
    Ls,
    /// Evict versions a remote fully holds (least recently used first), then gc. Never
    /// deletes the only copy of data unless --allow-data-loss; never pinned or in-use data.
    Prune {
        /// Keep the newest N versions of each dataset.
        #[arg(long, default_value_t = 1, value_name = "N")]
        keep_last: usize,
        /// Only versions unused for this long (e.g. 30d).
        #[arg(long, value_name = "AGE", value_parser = humantime::parse_duration)]
        older_than: Option<std::time::Duration>,
        /// Evict until the chunks held here fit in SIZE (e.g. 50GB, 512MiB).
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        max_size: Option<u64>,
        /// Only this dataset.
        #[arg(long, value_name = "NAME")]
        dataset: Option<String>,
        /// Remove versions no remote holds instead of skipping them (pins still hold).
        #[arg(long)]
        allow_data_loss: bool,
        /// Print what would be evicted; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Debug, Subcommand)]
enum RemoteCommand {
    /// Add a remote. Credentials are read from the environment (AWS_*, AZURE_*, GOOGLE_*)
    /// when it is used, never stored.
    Add {
        /// Its name, e.g. origin.
        name: String,
        /// s3://bucket/prefix, gs://bucket/prefix, az://container/prefix or file:///path.
        url: String,
        /// A backend setting as KEY=VALUE (repeatable), e.g. aws_region=eu-west-1.
        #[arg(long = "option", value_name = "KEY=VALUE")]
        options: Vec<String>,
    },
    /// List the remotes with their URLs, options and refs as last fetched.
    Ls,
    /// Remove a remote from this store (nothing on the remote is deleted).
    Rm {
        /// The remote.
        name: String,
    },
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

#[derive(Debug, Args)]
struct CommitArgs {
    /// The directory to snapshot (anywhere on disk).
    dir: PathBuf,
    /// The dataset to add a version to (created if new).
    #[arg(short, long)]
    dataset: String,
    /// The commit message.
    #[arg(short, long, default_value = "")]
    message: String,
    /// Tag the new version.
    #[arg(short, long)]
    tag: Option<String>,
    /// Record a new version even when nothing changed.
    #[arg(long)]
    allow_empty: bool,
    /// zstd compression level (1-19).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=19))]
    compression_level: i32,
    #[command(flatten)]
    jobs: JobsArg,
}

#[derive(Debug, Args)]
struct ImportArgs {
    /// `s3://bucket/key` (an archive is expanded), `s3://bucket/prefix/` (every object under
    /// it, keys as paths), `gs://…`, `az://…`, `http(s)://host/file`, or a local file or
    /// directory.
    source: String,
    /// The dataset (default: the last path element without its archive extension:
    /// `s3://b/mnist.zip` → mnist).
    #[arg(short, long)]
    dataset: Option<String>,
    /// Import only if the object's ETag is this (with or without quotes); else fail, writing
    /// nothing. Single objects only.
    #[arg(long)]
    etag: Option<String>,
    /// Import this version of the object (S3 VersionId). Single objects only.
    #[arg(long)]
    version_id: Option<String>,
    /// Fail unless the object is an archive dsv expands (.zip, .tar, .tar.gz, .tgz,
    /// .tar.gz2, .tar.bz2, .tbz, .tbz2, .tar.xz, .txz).
    #[arg(long, conflicts_with = "no_extract")]
    extract: bool,
    /// Store an archive as it is instead of expanding it.
    #[arg(long)]
    no_extract: bool,
    /// The message (default: "import SOURCE").
    #[arg(short, long)]
    message: Option<String>,
    /// Tag the new version.
    #[arg(short, long)]
    tag: Option<String>,
    #[command(flatten)]
    settings: SourceArgs,
}

/// Settings shared by `import` and `update`.
#[derive(Debug, Args)]
struct SourceArgs {
    /// An object storage setting as KEY=VALUE (repeatable), as for `remote add`; credentials
    /// come from the environment.
    #[arg(long = "option", value_name = "KEY=VALUE")]
    options: Vec<String>,
    /// Refuse an archive that expands to more than N times its compressed size (beyond the
    /// first 64 MiB): a decompression bomb.
    #[arg(long, value_name = "N", default_value_t = dsv::archive::DEFAULT_MAX_RATIO)]
    max_expansion_ratio: u64,
    /// Refuse an archive that expands to more than SIZE in all (e.g. 500GB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    max_expanded_size: Option<u64>,
    /// zstd compression level (1-19).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=19))]
    compression_level: i32,
    #[command(flatten)]
    jobs: JobsArg,
}

impl SourceArgs {
    fn settings(&self) -> anyhow::Result<import::SourceSettings> {
        let mut settings = import::SourceSettings::default();
        settings.author = Some(default_author());
        settings.options = parse_options(&self.options)?;
        settings.limits = dsv::archive::Limits {
            max_ratio: self.max_expansion_ratio,
            max_size: self.max_expanded_size,
        };
        settings.ingest.jobs = jobs_or(&self.jobs, settings.ingest.jobs);
        settings.ingest.compression_level = self.compression_level;
        settings.requests = jobs_or(&self.jobs, dsv::remote::DEFAULT_JOBS);
        Ok(settings)
    }
}

#[derive(Debug, Args)]
struct CheckoutArgs {
    /// The revision: NAME, NAME@latest, NAME@TAG, NAME@<id prefix>, NAME@latest~N, or
    /// REMOTE/NAME[@REV]. With --lock, give only DIR.
    #[arg(value_name = "REVISION", required_unless_present = "lock")]
    revision: Option<String>,
    /// Where to materialize it (with --lock: each dataset into DIR/NAME).
    #[arg(required_unless_present = "lock")]
    dir: Option<PathBuf>,
    /// Materialize exactly the versions this lock file pins (see `dsv lock`), or fail.
    #[arg(long, value_name = "FILE")]
    lock: Option<PathBuf>,
    /// Overwrite or delete changes that were never committed.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    select: SelectArgs,
    #[command(flatten)]
    jobs: JobsArg,
}

/// Runs the CLI and returns the process exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                error::USAGE
            } else {
                error::SUCCESS
            });
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("DSV_LOG"))
        .with_writer(std::io::stderr)
        .init();
    // The first Ctrl-C asks the running operation to stop at a consistent point; a second
    // one exits at once (the store stays consistent either way: see docs/architecture.md).
    let token = dsv::interrupt::CancelToken::new();
    let handler_token = token.clone();
    let _ = ctrlc::set_handler(move || {
        if handler_token.is_cancelled() {
            std::process::exit(i32::from(error::INTERRUPTED));
        }
        handler_token.cancel();
    });
    let ui = Ui::new(cli.json, cli.quiet, cli.no_progress);
    match token.run(|| run(&cli, &ui)) {
        Ok(code) => ExitCode::from(code),
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            report_error(&ui, &e);
            ExitCode::from(error::exit_code(&e))
        }
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

fn report_error(ui: &Ui, e: &anyhow::Error) {
    let causes = error::causes(e);
    let hints = error::hints(e);
    if ui.json {
        let value = serde_json::json!({
            "error": { "kind": error::kind_name(e), "message": e.to_string(), "causes": causes, "hints": hints }
        });
        let _ = ui.json(&value);
    }
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "error: {e}");
    for cause in causes {
        let _ = writeln!(err, "  caused by: {cause}");
    }
    for hint in hints {
        let _ = writeln!(err, "\nhint: {hint}");
    }
}

fn open_store(cli: &Cli) -> anyhow::Result<Store> {
    let start = match &cli.store {
        Some(path) => path.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    Ok(Store::discover(&start)?)
}

fn jobs_or(jobs: &JobsArg, default: usize) -> usize {
    dsv::parallel::clamp_jobs(jobs.jobs.unwrap_or(default))
}

/// `--jobs` accepts `1..=MAX_JOBS`: more threads than that only contend, and a huge count
/// would exhaust the threads a process may start.
fn jobs_range() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(1..=dsv::parallel::MAX_JOBS as u64)
}

fn run(cli: &Cli, ui: &Ui) -> anyhow::Result<u8> {
    let progress = ui.reporter();
    match &cli.command {
        Command::Init { dir } => {
            let dir = match dir {
                Some(d) => d.clone(),
                None => cli.store.clone().map_or_else(std::env::current_dir, Ok)?,
            };
            // `init X/.dsv` means the store at X/.dsv, not X/.dsv/.dsv.
            let dir = match dir.file_name() {
                Some(name) if name == dsv::store::STORE_DIR => dir
                    .parent()
                    .map(std::path::Path::to_path_buf)
                    .unwrap_or(dir),
                _ => dir,
            };
            let store = Store::init(&dir)?;
            let root = std::fs::canonicalize(store.root())?;
            if ui.json {
                ui.json(&serde_json::json!({ "store": root }))?;
            } else {
                ui.line(format!(
                    "Initialized an empty dsv store in {}",
                    root.display()
                ))?;
            }
        }
        Command::Commit(args) => {
            let mut store = open_store(cli)?;
            let mut options = commit::CommitOptions::new(args.dataset.clone());
            options.message = args.message.clone();
            options.tag = args.tag.clone();
            options.author = Some(default_author());
            options.allow_empty = args.allow_empty;
            options.ingest.jobs = jobs_or(&args.jobs, options.ingest.jobs);
            options.ingest.compression_level = args.compression_level;
            let report = commit::commit(&mut store, &args.dir, &options, &progress)?;
            ui.report(&report, render::commit)?;
        }
        Command::Checkout(args) if args.lock.is_some() => {
            let mut store = open_store(cli)?;
            let lock_path = args.lock.as_ref().expect("guarded");
            let dir = match (&args.revision, &args.dir) {
                (Some(dir), None) => PathBuf::from(dir),
                _ => anyhow::bail!(
                    "with --lock, give only the directory: dsv checkout --lock FILE DIR"
                ),
            };
            let mut options = checkout::CheckoutOptions::default();
            options.force = args.force;
            options.jobs = jobs_or(&args.jobs, options.jobs);
            options.selection = args.select.selection()?;
            let requests = jobs_or(&args.jobs, dsv::remote::DEFAULT_JOBS);
            let report = checkout::checkout_lock(
                &mut store, lock_path, &dir, &options, requests, &progress,
            )?;
            if ui.json {
                ui.json(&report)?;
            } else {
                for checkout in &report.datasets {
                    ui.line(render::checkout(checkout))?;
                }
            }
        }
        Command::Checkout(args) => {
            let mut store = open_store(cli)?;
            let (Some(revision_text), Some(dir)) = (&args.revision, &args.dir) else {
                anyhow::bail!(
                    "give a revision and a directory: dsv checkout REVISION DIR (or --lock FILE DIR)"
                );
            };
            let mut options = checkout::CheckoutOptions::default();
            options.force = args.force;
            options.jobs = jobs_or(&args.jobs, options.jobs);
            options.selection = args.select.selection()?;
            let requests = jobs_or(&args.jobs, dsv::remote::DEFAULT_JOBS);
            let outcome = checkout::checkout_from_anywhere(
                &mut store,
                revision_text,
                dir,
                &options,
                requests,
                &progress,
            )?;
            if ui.json {
                ui.json(&outcome)?;
            } else {
                if let Some(fetched) = &outcome.remote {
                    ui.line(render::fetched(fetched))?;
                }
                ui.line(render::checkout(&outcome.checkout))?;
            }
        }
        Command::Status {
            dir,
            exit_code,
            jobs,
        } => {
            let mut store = open_store(cli)?;
            let defaults = IngestOptions::default().jobs;
            let report = status::status(&mut store, dir, jobs_or(jobs, defaults), &progress)?;
            ui.report(&report, render::status)?;
            if *exit_code && !report.changes.is_empty() {
                return Ok(error::DIFFERENCES);
            }
        }
        Command::Diff {
            old,
            new,
            exit_code,
        } => {
            let store = open_store(cli)?;
            let (older, newer) = match new {
                Some(new) => (Some(Revision::parse(old)?), Revision::parse(new)?),
                None => (None, Revision::parse(old)?),
            };
            let report = inspect::diff(&store, older.as_ref(), &newer)?;
            if ui.json {
                ui.json(&report)?;
            } else {
                ui.line(render::changes(&report.changes, "no differences"))?;
            }
            if *exit_code && !report.changes.is_empty() {
                return Ok(error::DIFFERENCES);
            }
        }
        Command::Log { dataset, limit } => {
            let store = open_store(cli)?;
            let versions = inspect::log(&store, dataset, *limit)?;
            ui.report(versions.as_slice(), render::log)?;
        }
        Command::Ls { target } => {
            let store = open_store(cli)?;
            match target {
                None => {
                    let datasets = inspect::datasets(&store)?;
                    ui.report(datasets.as_slice(), render::datasets)?;
                }
                Some(target) => {
                    let (revision, path) = target.split_once(':').unwrap_or((target, ""));
                    let entries = inspect::ls(&store, &Revision::parse(revision)?, path)?;
                    ui.report(entries.as_slice(), render::entries)?;
                }
            }
        }
        Command::Show {
            revision,
            provenance,
        } => {
            let store = open_store(cli)?;
            let info = inspect::show(&store, &Revision::parse(revision)?)?;
            if *provenance {
                let shown = inspect::ShownProvenance {
                    provenance: inspect::provenance(&store, &info)?,
                    version: info,
                };
                ui.report(&shown, render::show_provenance)?;
            } else {
                ui.report(&info, render::show)?;
            }
        }
        Command::Import(args) => {
            // A pin names one object; a URL that can only be a prefix cannot take one.
            let is_prefix = args.source.ends_with('/')
                || args.source.split_once("://").is_some_and(|(scheme, rest)| {
                    scheme != "file" && !scheme.starts_with("http") && !rest.contains('/')
                });
            if is_prefix && (args.etag.is_some() || args.version_id.is_some()) {
                use clap::CommandFactory;
                Cli::command()
                    .error(
                        clap::error::ErrorKind::ArgumentConflict,
                        "--etag and --version-id pin a single object; the source is a prefix",
                    )
                    .exit();
            }
            let mut store = open_store(cli)?;
            let mut options = import::ImportOptions::new(args.source.clone());
            options.dataset = args.dataset.clone();
            options.pin = dsv::source::Pin {
                etag: args.etag.clone(),
                version_id: args.version_id.clone(),
            };
            options.extract = match (args.extract, args.no_extract) {
                (true, _) => import::Extract::Always,
                (_, true) => import::Extract::Never,
                _ => import::Extract::Auto,
            };
            options.message = args.message.clone();
            options.tag = args.tag.clone();
            options.settings = args.settings.settings()?;
            let report = import::import(&mut store, &options, &progress)?;
            ui.report(&report, render::import)?;
            if report.redacted_url {
                ui.note(render::REDACTED_URL_NOTE)?;
            }
        }
        Command::Update {
            dataset,
            message,
            settings: source,
        } => {
            let mut store = open_store(cli)?;
            let report = import::update(
                &mut store,
                dataset,
                message.clone(),
                &source.settings()?,
                &progress,
            )?;
            ui.report(&report, render::import)?;
        }
        Command::Tag {
            revision,
            tag,
            force,
        } => {
            let mut store = open_store(cli)?;
            let revision = Revision::parse(revision)?;
            let id = inspect::tag(&mut store, &revision, tag, *force)?;
            if ui.json {
                ui.json(
                    &serde_json::json!({ "dataset": revision.dataset, "tag": tag, "version": id }),
                )?;
            } else {
                ui.line(format!(
                    "Tagged {}@{} as {tag}",
                    revision.dataset,
                    id.short()
                ))?;
            }
        }
        Command::Export {
            revision,
            format: ExportFormat::Tar,
            output,
            select,
        } => {
            let selection = select.selection()?;
            let engine = dsv::read::ReadEngine::new(open_store(cli)?, Default::default());
            let report = if output.as_os_str() == "-" {
                let stdout = std::io::stdout();
                let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
                dsv::read::export_tar(
                    &engine,
                    revision,
                    &selection,
                    &mut out,
                    std::path::Path::new("<stdout>"),
                    &progress,
                )?
            } else {
                // Never over a store's own files (a pack, the catalog): dsv alone writes there.
                dsv::walk::check_workspace_dir(output)?;
                let file = std::fs::File::create(output)
                    .with_context(|| format!("cannot create {}", output.display()))?;
                let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
                dsv::read::export_tar(&engine, revision, &selection, &mut out, output, &progress)?
            };
            // Stdout carries the stream: the report goes to stderr.
            if output.as_os_str() != "-" {
                ui.report(&report, render::export)?;
            }
        }
        Command::Mount {
            revision,
            mountpoint,
            select,
            threads,
        } => {
            let selection = select.selection()?;
            let engine = dsv::read::ReadEngine::new(open_store(cli)?, Default::default());
            let mut options = dsv::mount::MountOptions::default();
            options.threads = usize::from(*threads);
            let mut shown = Ok(());
            let info = dsv::mount::mount(
                &engine,
                revision,
                &selection,
                mountpoint,
                &options,
                &mut |info| shown = ui.report(info, render::mounted),
            )?;
            shown?;
            if !ui.json {
                ui.line(format!("Unmounted {}", info.mountpoint.display()))?;
            }
        }
        Command::Shards {
            revision,
            count,
            include,
            files_from,
        } => {
            let mut selection = dsv::read::Selection::default();
            selection.include = include.clone();
            selection.files_from = files_from.as_deref().map(read_list).transpose()?;
            let engine = dsv::read::ReadEngine::new(open_store(cli)?, Default::default());
            let plans = dsv::read::shards(&engine, revision, *count, &selection)?;
            ui.report(plans.as_slice(), render::shards)?;
        }
        Command::Cat { target, range } => {
            let store = open_store(cli)?;
            let (revision, path) = target.split_once(':').ok_or_else(|| {
                anyhow::anyhow!("expected REV:PATH, for example mnist@v1:train/0.png")
            })?;
            let range = range.as_deref().map(parse_range).transpose()?;
            let engine = dsv::read::ReadEngine::new(store, Default::default());
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            dsv::read::cat(&engine, revision, path, range, &mut out)?;
            out.flush()?;
        }
        Command::Repair => {
            let start = match &cli.store {
                Some(path) => path.clone(),
                None => std::env::current_dir().context("cannot read the current directory")?,
            };
            let root = Store::find_root(&start)?;
            let report = dsv::ops::repair::repair(&root, &progress)?;
            ui.report(&report, render::repair)?;
        }
        Command::Verify { full } => {
            let store = open_store(cli)?;
            let report = verify::verify(&store, *full, &progress)?;
            ui.report(&report, render::verify)?;
            if !report.problems.is_empty() {
                return Ok(error::CORRUPT);
            }
        }
        Command::Audit {
            dir,
            against,
            lock,
            full,
            jobs,
        } => {
            let mut store = open_store(cli)?;
            let jobs = jobs_or(jobs, IngestOptions::default().jobs);
            match lock {
                Some(lock_path) => {
                    let lock = audit::read_lock(lock_path)?;
                    let pinned =
                        audit::resolve_lock(&mut store, lock_path, &lock, jobs, &progress)?;
                    let mut reports = Vec::new();
                    for (dataset, version) in &pinned {
                        let target = Some((dataset.as_str(), *version, "lock"));
                        reports.push(audit::audit(
                            &store,
                            &dir.join(dataset),
                            target,
                            *full,
                            jobs,
                            &progress,
                        )?);
                    }
                    let identical = reports.iter().all(|r| r.identical);
                    if ui.json {
                        ui.json(&serde_json::json!({
                            "lock": lock_path, "identical": identical, "datasets": reports
                        }))?;
                    } else {
                        for report in &reports {
                            ui.line(render::audit(report))?;
                        }
                    }
                    if !identical {
                        return Ok(error::DIFFERENCES);
                    }
                }
                None => {
                    let target = match against {
                        Some(text) => {
                            let revision = Revision::parse(text)?;
                            let id = revision.resolve(store.catalog())?;
                            Some((revision.dataset, id))
                        }
                        None => None,
                    };
                    let report = audit::audit(
                        &store,
                        dir,
                        target.as_ref().map(|(d, id)| (d.as_str(), *id, "revision")),
                        *full,
                        jobs,
                        &progress,
                    )?;
                    ui.report(&report, render::audit)?;
                    if !report.identical {
                        return Ok(error::DIFFERENCES);
                    }
                }
            }
        }
        Command::Workspace(WorkspaceCommand::Ls) => {
            let store = open_store(cli)?;
            let workspaces = dsv::ops::workspace::list(&store)?;
            ui.report(workspaces.as_slice(), render::workspaces)?;
        }
        Command::Workspace(WorkspaceCommand::Forget { dir }) => {
            let mut store = open_store(cli)?;
            let forgotten = dsv::ops::workspace::forget(&mut store, dir)?;
            if ui.json {
                ui.json(&forgotten)?;
            } else {
                ui.line(format!("Forgot the workspace {}", forgotten.path))?;
            }
        }
        Command::Cache(CacheCommand::Ls) => {
            let store = open_store(cli)?;
            let versions = cache::list(&store)?;
            ui.report(versions.as_slice(), render::cache)?;
        }
        Command::Cache(CacheCommand::Prune {
            keep_last,
            older_than,
            max_size,
            dataset,
            allow_data_loss,
            dry_run,
        }) => {
            let mut store = open_store(cli)?;
            let mut options = cache::PruneOptions::default();
            options.keep_last = *keep_last;
            options.older_than = *older_than;
            options.max_size = *max_size;
            options.dataset = dataset.clone();
            options.allow_data_loss = *allow_data_loss;
            options.dry_run = *dry_run;
            let report = cache::prune(&mut store, &options, &progress)?;
            ui.report(&report, render::prune)?;
        }
        Command::Gc { dry_run, grace } => {
            let mut store = open_store(cli)?;
            let report = gc::gc(&mut store, *dry_run, *grace, &progress)?;
            ui.report(&report, render::gc)?;
        }
        Command::Rm { target, force } => {
            let mut store = open_store(cli)?;
            let report = gc::remove(&mut store, target, *force)?;
            ui.report(&report, render::removed)?;
        }
        Command::Pin {
            revision,
            reason,
            until,
        } => {
            let mut store = open_store(cli)?;
            let until = until.as_deref().map(parse_until).transpose()?;
            let pin = gc::pin(&mut store, &Revision::parse(revision)?, reason, until)?;
            ui.report(&pin, |p| {
                format!("Pinned {}@{}", p.dataset, p.version.short())
            })?;
        }
        Command::Unpin { revision } => {
            let mut store = open_store(cli)?;
            let id = gc::unpin(&mut store, &Revision::parse(revision)?)?;
            ui.report(&serde_json::json!({ "unpinned": id }), |_| {
                format!("Unpinned {}", id.short())
            })?;
        }
        Command::Pins => {
            let store = open_store(cli)?;
            let pins = store.catalog().pins()?;
            ui.report(pins.as_slice(), render::pins)?;
        }
        Command::Lock { revisions } => {
            let store = open_store(cli)?;
            let revisions = revisions
                .iter()
                .map(|r| Revision::parse(r))
                .collect::<Result<Vec<_>, _>>()?;
            let lock = audit::lock(&store, &revisions)?;
            // The lock file is JSON whatever the output mode: it is meant to be redirected.
            ui.json(&lock)?;
        }
        Command::Remote(command) => {
            let mut store = open_store(cli)?;
            match command {
                RemoteCommand::Add { name, url, options } => {
                    let record = sync::add_remote(&mut store, name, url, &parse_options(options)?)?;
                    if ui.json {
                        ui.json(&record)?;
                    } else {
                        ui.line(format!("Added remote {} at {}", record.name, record.url))?;
                    }
                }
                RemoteCommand::Ls => {
                    let mut listed = Vec::new();
                    for record in store.catalog().remotes()? {
                        let refs = store.catalog().remote_refs(record.id)?;
                        listed.push((record, refs));
                    }
                    if ui.json {
                        let value: Vec<_> = listed
                            .iter()
                            .map(|(record, refs)| {
                                serde_json::json!({
                                    "name": record.name,
                                    "url": record.url,
                                    "options": record.options,
                                    "refs": refs,
                                })
                            })
                            .collect();
                        ui.json(&value)?;
                    } else {
                        ui.line(render::remotes(&listed))?;
                    }
                }
                RemoteCommand::Rm { name } => {
                    sync::remove_remote(&mut store, name)?;
                    if ui.json {
                        ui.json(&serde_json::json!({ "removed": name }))?;
                    } else {
                        ui.line(format!("Removed remote {name}"))?;
                    }
                }
            }
        }
        Command::Push {
            revision,
            remote,
            force,
            jobs,
        } => {
            let mut store = open_store(cli)?;
            let name = remote_name(&store, remote)?;
            let revision = revision.as_deref().map(Revision::parse).transpose()?;
            let report = sync::push(
                &mut store,
                &name,
                revision.as_ref(),
                *force,
                jobs_or(jobs, dsv::remote::DEFAULT_JOBS),
                &progress,
            )?;
            ui.report(&report, render::push)?;
        }
        Command::Pull {
            revision,
            remote,
            include,
            jobs,
        } => {
            let mut store = open_store(cli)?;
            let name = remote_name(&store, remote)?;
            let target = sync::RemoteRevision {
                remote: name,
                revision: Revision::parse(revision)?,
            };
            let include = glob_set(include)?;
            let report = sync::pull(
                &mut store,
                &target,
                include.as_ref(),
                jobs_or(jobs, dsv::remote::DEFAULT_JOBS),
                &progress,
            )?;
            ui.report(&report, render::pull)?;
        }
        Command::Fetch { remote, jobs } => {
            let mut store = open_store(cli)?;
            let name = remote_name(&store, remote)?;
            let report = sync::fetch(
                &mut store,
                &name,
                jobs_or(jobs, dsv::remote::DEFAULT_JOBS),
                &progress,
            )?;
            ui.report(&report, render::fetch)?;
        }
        Command::Clone {
            url,
            dir,
            options,
            jobs,
        } => {
            let dir = match dir {
                Some(dir) => dir.clone(),
                None => PathBuf::from(clone_dir_name(url)?),
            };
            dsv::walk::check_workspace_dir(&dir)?;
            let report = sync::clone(
                url,
                &dir,
                &parse_options(options)?,
                jobs_or(jobs, dsv::remote::DEFAULT_JOBS),
                &progress,
            )?;
            ui.report(&report, render::clone)?;
        }
    }
    Ok(error::SUCCESS)
}

/// `--remote NAME`, else `origin`, else the only remote.
fn remote_name(store: &Store, arg: &RemoteArg) -> anyhow::Result<String> {
    if let Some(name) = &arg.name {
        return Ok(name.clone());
    }
    let remotes = store.catalog().remotes()?;
    match remotes.as_slice() {
        [only] => Ok(only.name.clone()),
        _ if remotes.iter().any(|r| r.name == "origin") => Ok("origin".into()),
        [] => anyhow::bail!("this store has no remote; add one with `dsv remote add origin URL`"),
        _ => anyhow::bail!(
            "this store has several remotes and none is called origin; pass --remote NAME"
        ),
    }
}

/// `--until`: an RFC 3339 time or a duration from now; Unix seconds.
fn parse_until(text: &str) -> anyhow::Result<i64> {
    let when = match humantime::parse_rfc3339_weak(text) {
        Ok(time) => time,
        Err(_) => {
            let duration = humantime::parse_duration(text).with_context(|| {
                format!(
                    "--until {text:?} is neither a time (2026-12-01T00:00:00Z) nor a duration (7d)"
                )
            })?;
            std::time::SystemTime::now() + duration
        }
    };
    Ok(when
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0))
}

/// A size: bytes, or a number with KB/MB/GB/TB (powers of 1000) or KiB/MiB/GiB/TiB.
fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size such as 50GB or 512MiB"))?;
    let factor: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(format!(
                "unknown size unit {other:?}: use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB"
            ));
        }
    };
    Ok((number * factor) as u64)
}

/// `KEY=VALUE` settings.
fn parse_options(options: &[String]) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    options
        .iter()
        .map(|option| {
            let (key, value) = option.split_once('=').ok_or_else(|| {
                anyhow::anyhow!("--option must look like KEY=VALUE, got {option:?}")
            })?;
            Ok((key.trim().to_string(), value.to_string()))
        })
        .collect()
}

/// The `--include` globs as one set, or `None` when there are none.
fn glob_set(globs: &[String]) -> anyhow::Result<Option<globset::GlobSet>> {
    if globs.is_empty() {
        return Ok(None);
    }
    let mut builder = globset::GlobSetBuilder::new();
    for glob in globs {
        builder.add(
            globset::GlobBuilder::new(glob)
                .literal_separator(true)
                .build()
                .with_context(|| format!("invalid --include pattern {glob:?}"))?,
        );
    }
    Ok(Some(builder.build()?))
}

/// The directory `clone URL` creates: the URL's last path element (`s3://b/team/mnist` →
/// `mnist`, `s3://b` → `b`). An element that names no new directory (`.`, `..`, nothing,
/// `.dsv`, the scheme of `file:///`) is refused: the store would land in the current or
/// parent directory.
fn clone_dir_name(url: &str) -> anyhow::Result<String> {
    let path = url.split_once("://").map_or(url, |(_, rest)| rest);
    let name = path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    if dsv::object::check_name(name).is_err() || dsv::walk::check_reserved_name(name).is_err() {
        anyhow::bail!(
            "cannot name a directory after {url:?} (its last path element is {name:?}); give one: dsv clone URL DIR"
        );
    }
    Ok(name.to_string())
}

/// Parses `START..END`, `START..` or `..END` (bytes, END exclusive).
fn parse_range(text: &str) -> anyhow::Result<std::ops::Range<u64>> {
    let (start, end) = text
        .split_once("..")
        .ok_or_else(|| anyhow::anyhow!("--range must look like START..END"))?;
    let start: u64 = if start.is_empty() {
        0
    } else {
        start.parse().context("--range START is not a number")?
    };
    let end: u64 = if end.is_empty() {
        u64::MAX
    } else {
        end.parse().context("--range END is not a number")?
    };
    anyhow::ensure!(start <= end, "--range START must not exceed END");
    Ok(start..end)
}

/// `DSV_AUTHOR`, else `$USER@hostname`, else "unknown".
fn default_author() -> String {
    if let Ok(author) = std::env::var("DSV_AUTHOR")
        && !author.is_empty()
    {
        return author;
    }
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "unknown".into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    if host.is_empty() {
        user
    } else {
        format!("{user}@{host}")
    }
}
