//! Turning library errors into messages, hints and exit codes (table in `docs/cli.md`).

use dsv::{Error, ErrorKind};

/// Exit code: success.
pub const SUCCESS: u8 = 0;
/// Exit code: `status`/`diff --exit-code` found differences.
pub const DIFFERENCES: u8 = 1;
/// Exit code: bad command-line usage (clap's own).
pub const USAGE: u8 = 2;
/// Exit code: the user named something that does not exist or gave invalid input.
pub const USER: u8 = 3;
/// Exit code: uncommitted changes are in the way.
pub const CONFLICT: u8 = 4;
/// Exit code: stored data failed a check.
pub const CORRUPT: u8 = 5;
/// Exit code: the operating system refused (disk full, permissions).
pub const IO: u8 = 6;
/// Exit code: a bug in dsv (sysexits' EX_SOFTWARE).
pub const INTERNAL: u8 = 70;
/// Exit code: interrupted by Ctrl-C.
pub const INTERRUPTED: u8 = 130;

/// A command line clap accepts but whose arguments do not go together (exit 2, as clap's own).
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// The exit code of an error.
pub fn exit_code(error: &anyhow::Error) -> u8 {
    if error.is::<Usage>() {
        return USAGE;
    }
    match error.downcast_ref::<Error>().map(Error::kind) {
        Some(ErrorKind::User) => USER,
        Some(ErrorKind::Conflict) => CONFLICT,
        Some(ErrorKind::Corrupt) => CORRUPT,
        Some(ErrorKind::Io) => IO,
        Some(ErrorKind::Interrupted) => INTERRUPTED,
        Some(ErrorKind::Internal) => INTERNAL,
        // An I/O error anywhere in the chain (also inside a JSON writer's error: a full
        // disk while printing `--json`) is the operating system's refusal.
        None if error.chain().any(|e| {
            e.is::<std::io::Error>()
                || e.downcast_ref::<serde_json::Error>()
                    .is_some_and(|e| e.io_error_kind().is_some())
        }) =>
        {
            IO
        }
        None => USER,
    }
}

/// A short name of the error's kind for `--json` output.
pub fn kind_name(error: &anyhow::Error) -> &'static str {
    match exit_code(error) {
        CONFLICT => "conflict",
        CORRUPT => "corrupt",
        IO => "io",
        INTERRUPTED => "interrupted",
        INTERNAL => "internal",
        USAGE => "usage",
        _ => "user",
    }
}

/// The error's causes, outermost first, without the error itself. A cause whose text the
/// previous one already contains is left out (HTTP client errors repeat their sources).
pub fn causes(error: &anyhow::Error) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if out.last().is_none_or(|last| !last.contains(&text)) {
            out.push(text);
        }
        source = cause.source();
    }
    out
}

/// What the user can do about the error.
pub fn hints(error: &anyhow::Error) -> Vec<String> {
    let Some(error) = error.downcast_ref::<Error>() else {
        return Vec::new();
    };
    let hint = match error {
        _ if error.is_disk_full() => {
            "free some disk space and run the command again; nothing was recorded".into()
        }
        Error::Io { source, .. } if source.kind() == std::io::ErrorKind::InvalidFilename => {
            "the path is longer than the operating system allows (4096 bytes in all, 255 a name): use a directory with a shorter path".into()
        }
        Error::NoStore { .. } => {
            "run `dsv init` to create a store here, or pass --store PATH / set DSV_STORE".into()
        }
        Error::StoreTooNew { .. } => "upgrade dsv to open this store".into(),
        Error::StoreBusy { .. } => "stop them (or wait for them to finish: a mount, a training job, a long checkout) and run `dsv repair` again; nothing was changed".into(),
        Error::CatalogLost { .. } => "run `dsv repair` to rebuild the catalog from the packs and the ref log; nothing has been deleted".into(),
        Error::DatasetNotFound { closest: Some(closest), .. } => format!("did you mean {closest}? `dsv ls` lists the datasets"),
        Error::DatasetNotFound { .. } => "`dsv ls` lists the datasets (`dsv commit DIR -d NAME` makes one)".into(),
        Error::RevisionNotFound { revision } if revision.rsplit_once('@').is_some_and(|(_, base)| base.eq_ignore_ascii_case("head")) => {
            let dataset = revision.split('@').next().unwrap_or(revision);
            format!("the head is {dataset}@latest (or {dataset}@HEAD, in capitals); `dsv log {dataset}` lists its versions and tags")
        }
        Error::RevisionNotFound { revision } if revision.split('@').next().is_some_and(|name| name.contains('/')) => {
            let (remote, dataset) = revision
                .split('@')
                .next()
                .and_then(|name| name.split_once('/'))
                .unwrap_or(("origin", revision));
            format!(
                "`dsv fetch --remote {remote}` lists the datasets and tags {remote} has; then `dsv pull NAME --remote {remote}` (or `dsv checkout {remote}/NAME DIR`). A dataset of this store: `dsv log {dataset}`"
            )
        }
        Error::RevisionNotFound { revision } | Error::AmbiguousRevision { revision, .. } => {
            let dataset = revision.split('@').next().unwrap_or(revision);
            format!("`dsv log {dataset}` lists its versions and tags")
        }
        Error::NothingMatches { revision, .. } => format!(
            "`dsv ls {revision}` lists its files; a pattern matches whole paths ('train/**', '*.png' only at the top level: '**/*.png' anywhere); quote it so the shell does not expand it"
        ),
        Error::NoSuchPath { .. } => "check the path (it is relative to the current directory)".into(),
        Error::NotADirectory { path } if path.is_file() => format!(
            "a directory is needed here; to version a single file, `dsv import {} -d NAME` makes a version holding it",
            path.display()
        ),
        Error::NotAFile { revision, path, kind: "a directory" } => format!("`dsv ls {revision}:{path}` lists the directory"),
        Error::DatasetExists { name } => format!("choose a name `dsv ls` does not list, or remove {name}'s versions with `dsv rm {name}` first"),
        Error::TagExists { .. } => "choose another tag, or move this one with `dsv tag REV TAG --force`".into(),
        Error::VersionTooLarge { .. } => {
            "fetch it on a machine with more memory, or split the dataset into smaller versions there".into()
        }
        Error::NoSpace { .. } => {
            "free space (or inodes) there, or check out into a directory on a larger file system; a partial checkout (--include, --shard) writes less".into()
        }
        Error::Conflict { .. } => {
            "commit those changes first, or pass --force to overwrite them (they will be lost)"
                .into()
        }
        Error::PartialCheckoutIntoWorkspace { .. } => {
            "check out the subset into an empty or new directory (`dsv workspace forget DIR` lets the workspace go, leaving its files)".into()
        }
        Error::NotAWorkspace { .. } => {
            "`dsv checkout REV DIR` or `dsv commit DIR -d DATASET` makes it one; `dsv workspace ls` lists this store's workspaces (--store PATH or DSV_STORE picks another store)".into()
        }
        Error::InsideWorkspace { dir, workspace, dataset } => format!(
            "commit the whole workspace from its root (`dsv commit {}`, or `dsv commit` anywhere inside it), or this directory as another dataset (`dsv commit {} -d NEW-NAME`); --force commits it to {dataset} anyway",
            workspace.display(),
            dir.display()
        ),
        Error::NestedStore { store, .. } => format!(
            "use the store at {} (run dsv there, or pass --store {}), or create the new store outside its tree; --force creates a nested store anyway (dsv commands run inside it will use the new store)",
            store.display(),
            store.display()
        ),
        Error::DatasetRequired { dir } => format!(
            "name the dataset: `dsv commit {} -d NAME` (a new name creates the dataset)",
            dir.display()
        ),
        _ if error.kind() == ErrorKind::Internal => {
            "this is a bug in dsv, not a problem with your data: please report it with the command you ran; `dsv verify` checks the store".into()
        }
        Error::Corrupt { path, .. } if path.starts_with("remote ") || path.to_string_lossy().contains(":packs/") || path.to_string_lossy().contains(":refs/") => {
            "the remote's copy is damaged or wrong, and nothing of it was kept here: fetch from another remote, or push again from a store that holds the data".into()
        }
        Error::Corrupt { .. } | Error::MissingObject { .. } => {
            "run `dsv verify` to check the whole store; the data must be restored from another copy"
                .into()
        }
        Error::Interrupted => "the store is consistent; run the command again to finish".into(),
        Error::LockedVersionUnknown { remotes, .. } if !remotes.is_empty() => format!(
            "add a remote the lock names and run again: `dsv remote add origin {}`",
            remotes[0]
        ),
        Error::LockedVersionUnknown { .. } => {
            "the lock names no remote: push the version from the store that made the lock, or use that store".into()
        }
        Error::VersionHeld { holders, .. } => held_hint(holders),
        Error::InvalidIgnoreFile { .. } => "fix that line (UTF-8 text, one gitignore-style rule a line) and run the command again; dsv obeys an ignore file whole, never part of it, so nothing was recorded".into(),
        Error::WorkspaceVersionRemoved { .. } => {
            "check out another version into it (`dsv checkout REV DIR`), commit it as a new version, or `dsv workspace forget DIR`".into()
        }
        Error::VersionRemoved { .. } => {
            "removal cannot be undone in this store; `dsv log NAME` shows the versions that remain, and another store or a clone of a remote that holds it can still check it out".into()
        }
        Error::FuseUnavailable { .. } => "install FUSE 3 (`apt-get install fuse3`, `dnf install fuse3`) and make sure /dev/fuse exists (in a container: `--device /dev/fuse --cap-add SYS_ADMIN`), or read the version without a mount: `dsv export REV | tar -x -C DIR` or `dsv checkout REV DIR`".into(),
        Error::BadMountpoint { .. } => "mount on an existing, empty directory that nothing is mounted on (`mkdir -p DIR`); `fusermount3 -u DIR` releases a mount that is there, a dead one too".into(),
        Error::RemoteNotFound { .. } => "`dsv remote ls` lists the remotes".into(),
        Error::SourceChanged { .. } => "nothing was imported; run the command again to import the object as it is now".into(),
        Error::Http { .. } => "check the URL and the network; nothing was imported, and a re-run starts again".into(),
        Error::EtagMismatch { .. } => "the object is not the one the import was pinned to, and nothing was imported: drop --etag to take the current object, or pin an older one of a versioned bucket with --version-id".into(),
        Error::SourceNotFound { .. } => "check the URL and, for object storage, the endpoint and credentials (AWS_ENDPOINT_URL, AWS_*, AZURE_*, GOOGLE_* environment variables); nothing was imported".into(),
        Error::UnsafeArchive { .. } => "nothing was imported: dsv never stores a path that leaves the dataset; fix the archive at its source".into(),
        Error::BadArchive { .. } => "nothing was imported; check the archive (`tar tvf`, `unzip -t`), or raise --max-expansion-ratio / --max-expanded-size if it is genuine".into(),
        Error::NotImported { dataset } => format!("`dsv import SOURCE --dataset {dataset}` records a source to update from; a committed dataset changes with `dsv commit`"),
        Error::PushBehind { dataset, remote, .. } => format!(
            "the remote already has newer versions of {dataset} on this line; `dsv push {dataset}@VERSION --remote {remote} --force` rewinds its head (they stay in its history)"
        ),
        Error::HeadMoved { dataset } => format!(
            "another command moved it meanwhile; `dsv log {dataset}` shows where it is, and running the rebase again starts from there"
        ),
        Error::NoCommonVersion { dataset, .. } => format!(
            "rebase onto a version of the same line (`dsv log {dataset}` lists them); with `dsv rebase`, --dataset names the dataset to rebase"
        ),
        Error::RemoteDiverged { dataset, remote } => format!(
            "`dsv pull {dataset} --rebase --remote {remote}` replays your versions onto theirs (when you changed other paths), then `dsv push` succeeds"
        ),
        Error::AwsProfileNotFound { profile, .. } => format!(
            "add a [profile {profile}] section to the config file or a [{profile}] section to the credentials file (`aws configure --profile {profile}`), or unset AWS_PROFILE"
        ),
        Error::AwsProfileFile { .. } => "fix the file (the format is the AWS CLI's: https://docs.aws.amazon.com/cli/latest/userguide/cli-configure-files.html), or point AWS_CONFIG_FILE / AWS_SHARED_CREDENTIALS_FILE elsewhere".into(),
        Error::AwsProfileUnsupported { profile, .. } => format!(
            "export the profile's credentials into the environment: eval \"$(aws configure export-credentials --profile {profile} --format env)\""
        ),
        Error::InvalidConfig { .. } => "fix or remove that line of the file (`dsv config --help` lists the settings); commands that read the settings fail until then".into(),
        Error::UnknownSetting { .. } | Error::InvalidSetting { .. } => "`dsv config --help` lists the settings and the values they take".into(),
        Error::Remote { source, .. } => match dsv::error::remote_refusal(source) {
            Some("missing bucket") => "the bucket (or container) does not exist: create it, or fix the remote's URL with `dsv remote rm` and `dsv remote add`".into(),
            Some(_) => "the remote refused the credentials: check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) or the AWS profile (AWS_PROFILE, ~/.aws/credentials), AZURE_STORAGE_ACCOUNT_KEY, GOOGLE_APPLICATION_CREDENTIALS and their permissions".into(),
            None => "check the URL, the endpoint and credentials (AWS_*, AZURE_*, GOOGLE_* environment variables) and that the bucket exists; a re-run of a push or pull sends only what is still missing".into(),
        },

        _ => return Vec::new(),
    };
    vec![hint]
}

/// The hint under a refused `rm`: what lets go of each holder it names.
fn held_hint(holders: &[dsv::error::Holder]) -> String {
    use dsv::error::Holder;
    let mut hints: Vec<String> = Vec::new();
    let mut add = |hint: String| {
        if !hints.contains(&hint) {
            hints.push(hint);
        }
    };
    for holder in holders {
        match holder {
            Holder::Head { dataset } => add(format!(
                "`dsv rm {dataset}` removes the whole dataset; `dsv reset {dataset} REV` first moves its head to another version"
            )),
            Holder::Tags { dataset, tags } => add(format!(
                "run it again with --force to drop the tags too, or delete them first with `dsv tag -d {dataset}@{}`",
                tags.first().map(String::as_str).unwrap_or("TAG")
            )),
            Holder::Pin { .. } => {
                add("`dsv unpin REV` lifts the pin (`dsv pins` lists them)".into())
            }
            Holder::Workspace { .. } => add(
                "`dsv workspace forget DIR` lets a directory go (its files are left as they are; `dsv workspace ls` lists them)".into(),
            ),
        }
    }
    hints.join("; ")
}
