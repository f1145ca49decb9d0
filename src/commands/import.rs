//! `dsv import` and `dsv update`: versions from object storage, URLs and local paths.

use clap::Args;
use dsv::ops::import;

use super::{compression_level_or, default_author, deltas_or, jobs_or, open_store, parse_options};
use crate::{Cli, JobsArg, error, parse_size, render, ui::Ui};

#[derive(Debug, Args)]
pub(crate) struct ImportArgs {
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

#[derive(Debug, Args)]
pub(crate) struct UpdateArgs {
    /// The dataset.
    dataset: String,
    /// The message (default: "update from SOURCE").
    #[arg(short, long)]
    message: Option<String>,
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
    /// Read at most SIZE from the source, every object together, and let an archive expand
    /// to at most SIZE (e.g. 50GB, 512MiB). An object that declares more (Content-Length, a
    /// listed size) is refused before anything is read; a body longer than it declared, or
    /// than SIZE, is refused while it is read. Default for object storage and HTTP(S): the
    /// free space of the store's disk less 5% and 16 MiB, and --max-undeclared-bytes for a
    /// body that declares no length; local files are held to their sizes.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    max_bytes: Option<u64>,
    /// Without --max-bytes, read at most SIZE of a body that declares no length (an HTTP
    /// response without Content-Length), so an endless one cannot fill a shared disk; a body
    /// that declares its length is held to it.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "10GiB")]
    max_undeclared_bytes: u64,
    /// Fail a request or a download that receives less than 1 KiB in DURATION (e.g. 30s,
    /// 5m): a stalled or trickling server.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = positive_duration)]
    stall_timeout: std::time::Duration,
    /// Fail the import if reading its source takes longer than DURATION in all (e.g. 2h,
    /// 30m; default: no limit).
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    timeout: Option<std::time::Duration>,
    /// zstd compression level (1-19; default: the store's core.compression_level, else 3).
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..=19))]
    compression_level: Option<i32>,
    /// Store every new chunk whole: no delta against the chunks of the same path in the
    /// dataset's head (by default a changed object's new chunks are stored as deltas when
    /// that saves at least half; the store's core.deltas = false does the same as this flag).
    #[arg(long)]
    no_deltas: bool,
    #[command(flatten)]
    jobs: JobsArg,
}

/// A duration such as 30s or 5m, more than zero.
fn positive_duration(text: &str) -> Result<std::time::Duration, String> {
    match humantime::parse_duration(text) {
        Ok(duration) if !duration.is_zero() => Ok(duration),
        Ok(_) => Err("must be more than zero".into()),
        Err(e) => Err(format!("{text:?} is not a duration such as 30s or 5m: {e}")),
    }
}

impl SourceArgs {
    fn settings(&self, store: &dsv::Store) -> anyhow::Result<import::SourceSettings> {
        let config = store.config()?;
        let mut settings = import::SourceSettings::default();
        settings.author = Some(default_author());
        settings.options = parse_options(&self.options)?;
        settings.limits = dsv::archive::Limits {
            max_ratio: self.max_expansion_ratio,
            max_size: self.max_expanded_size,
            max_stored: None,
        };
        settings.max_bytes = self.max_bytes;
        settings.max_undeclared_bytes = self.max_undeclared_bytes;
        settings.stall_timeout = self.stall_timeout;
        settings.timeout = self.timeout;
        settings.ingest.jobs = jobs_or(&self.jobs, &config, settings.ingest.jobs);
        settings.ingest.compression_level = compression_level_or(
            self.compression_level,
            &config,
            settings.ingest.compression_level,
        );
        settings.ingest.deltas = deltas_or(self.no_deltas, &config);
        settings.requests = jobs_or(&self.jobs, &config, dsv::remote::DEFAULT_JOBS);
        Ok(settings)
    }
}

pub(crate) fn import(cli: &Cli, ui: &Ui, args: &ImportArgs) -> anyhow::Result<u8> {
    // A pin names one object; a URL that can only be a prefix cannot take one.
    let is_prefix = dsv::source::is_prefix_url(&args.source);
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
    options.settings = args.settings.settings(&store)?;
    let report = import::import(&mut store, &options, &ui.reporter())?;
    ui.report(&report, render::import)?;
    if report.redacted_url {
        ui.note(render::REDACTED_URL_NOTE)?;
    }
    Ok(error::SUCCESS)
}

pub(crate) fn update(cli: &Cli, ui: &Ui, args: &UpdateArgs) -> anyhow::Result<u8> {
    let mut store = open_store(cli)?;
    let settings = args.settings.settings(&store)?;
    let report = import::update(
        &mut store,
        &args.dataset,
        args.message.clone(),
        &settings,
        &ui.reporter(),
    )?;
    ui.report(&report, render::import)?;
    Ok(error::SUCCESS)
}
