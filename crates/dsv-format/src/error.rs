//! The library's error type.
//!
//! Policy (after jj's and rustic's): one public, `#[non_exhaustive]` [`Error`] whose variants
//! carry structured fields; messages never repeat their `source` (the CLI prints the chain as
//! "caused by:" lines); every I/O error names its path ([`IoResultExt::at`]). [`Error::kind`]
//! groups the variants so the CLI can map each group to one exit code.

use std::io;
use std::path::{Path, PathBuf};

/// The result type of every fallible function in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What kind of failure an [`Error`] is; the CLI maps each kind to an exit code
/// (see `docs/cli.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The user named something that does not exist, or gave invalid input.
    User,
    /// The operation would lose uncommitted work; `--force` overrides.
    Conflict,
    /// Stored data failed a hash or format check.
    Corrupt,
    /// The operating system refused (disk full, permissions, missing files).
    Io,
    /// The user interrupted the operation (Ctrl-C).
    Interrupted,
    /// A bug in dsv (an SQLite logic error, a broken invariant): not bad input, not damaged
    /// data.
    Internal,
}

impl ErrorKind {
    /// Every kind, in the order of the exit-code table.
    pub const ALL: [ErrorKind; 6] = [
        ErrorKind::User,
        ErrorKind::Conflict,
        ErrorKind::Corrupt,
        ErrorKind::Io,
        ErrorKind::Interrupted,
        ErrorKind::Internal,
    ];

    /// The kind's short name: the `kind` of `dsv --json`'s error object and of the Python
    /// package's exceptions (`"user"`, `"conflict"`, `"corrupt"`, `"io"`, `"interrupted"`,
    /// `"internal"`).
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::User => "user",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::Io => "io",
            ErrorKind::Interrupted => "interrupted",
            ErrorKind::Internal => "internal",
        }
    }

    /// The Python package's exception class (in `dsv.errors`) for an error of this kind
    /// that has no class of its own ([`Error::python_class`]).
    pub fn python_class(self) -> &'static str {
        match self {
            ErrorKind::User => "Error",
            ErrorKind::Conflict => "Conflict",
            ErrorKind::Corrupt => "Corrupt",
            ErrorKind::Io => "IoError",
            ErrorKind::Interrupted => "Interrupted",
            ErrorKind::Internal => "InternalError",
        }
    }
}

/// The causes of `error`, outermost first, without `error` itself: the "caused by:" lines
/// under an error. A cause whose text the previous one already contains is left out (HTTP
/// client errors repeat their sources).
///
/// An object store's XML error body in a cause (S3's, Azure's `<Error><Code>...`) is shown
/// as its code and message (`without_error_xml`): `NoSuchBucket: the bucket X does not
/// exist`.
pub fn causes(error: &dyn std::error::Error) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = without_error_xml(&cause.to_string());
        if out.last().is_none_or(|last| !last.contains(&text)) {
            out.push(text);
        }
        source = cause.source();
    }
    out
}

/// `text` with an XML error body (from `<?xml` or `<Error>` to its end) replaced by
/// `CODE: MESSAGE` (the message's first line; for `NoSuchBucket`, "the bucket NAME does not
/// exist"); `text` itself when it holds none, or one without a `<Code>`.
pub(crate) fn without_error_xml(text: &str) -> String {
    let Some(start) = text.find("<?xml").or_else(|| text.find("<Error>")) else {
        return text.to_string();
    };
    let body = &text[start..];
    let element = |name: &str| -> Option<&str> {
        let open = format!("<{name}>");
        let from = body.find(&open)? + open.len();
        let to = body[from..].find(&format!("</{name}>"))? + from;
        Some(body[from..to].trim())
    };
    let Some(code) = element("Code") else {
        return text.to_string();
    };
    let end = body
        .find("</Error>")
        .map_or(body.len(), |e| e + "</Error>".len());
    let message = match (code, element("BucketName")) {
        ("NoSuchBucket", Some(bucket)) => format!("the bucket {bucket} does not exist"),
        _ => element("Message")
            .and_then(|m| m.lines().next())
            .unwrap_or("")
            .trim()
            .trim_end_matches('.')
            .to_string(),
    };
    let shown = if message.is_empty() {
        code.to_string()
    } else {
        format!("{code}: {message}")
    };
    format!("{}{shown}{}", &text[..start], &body[end..])
}

/// A foreign error kept as the cause of an [`Error`]: the layer that owns the foreign type
/// (the store crate for SQLite, the remote crate for object storage and HTTP) boxes it.
pub type ForeignError = Box<dyn std::error::Error + Send + Sync>;

/// What a failure of the catalog's database means, decided by the crate that owns the
/// database when it builds the [`Error::Catalog`] (the store crate reads SQLite's codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatalogClass {
    /// The disk is full (or a write failed the way a full disk makes it fail): exit 6, the
    /// disk-full hint.
    DiskFull,
    /// The environment refused: the file cannot be opened, is read-only or locked, an I/O
    /// error (exit 6).
    Environment,
    /// The database file is damaged (exit 5).
    Corrupt,
    /// Anything else (a constraint, a misuse, a row that is not there): a query that should
    /// not have been made, a bug in dsv (exit 70).
    Bug,
}

/// The payload of [`Error::Catalog`]: the database's error, its class and the message shown
/// for it. It shows (and chains) as the database's own error, so [`causes`] lists that
/// error's text as before.
#[derive(Debug)]
pub struct CatalogFailure {
    class: CatalogClass,
    message: &'static str,
    source: ForeignError,
}

impl CatalogFailure {
    /// A failure of class `class`, shown as `message` ("catalog error", "cannot write the
    /// catalog: the disk is full"), caused by `source` (the database's error).
    pub fn new(class: CatalogClass, message: &'static str, source: ForeignError) -> Self {
        CatalogFailure {
            class,
            message,
            source,
        }
    }

    /// What the failure means.
    pub fn class(&self) -> CatalogClass {
        self.class
    }

    /// The message [`Error::Catalog`] shows.
    pub fn message(&self) -> &'static str {
        self.message
    }

    /// The database's error.
    pub fn foreign(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self.source.as_ref()
    }

    /// The error kind of its class.
    pub fn kind(&self) -> ErrorKind {
        match self.class {
            CatalogClass::DiskFull | CatalogClass::Environment => ErrorKind::Io,
            CatalogClass::Corrupt => ErrorKind::Corrupt,
            CatalogClass::Bug => ErrorKind::Internal,
        }
    }
}

impl std::fmt::Display for CatalogFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.source.fmt(f)
    }
}

impl std::error::Error for CatalogFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.source()
    }
}

/// What a failed request to a remote or an import source means, decided by the remote crate
/// when it builds the [`Error::Remote`] or [`Error::Http`] (from object_store's or the HTTP
/// client's error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteClass {
    /// The bucket or container does not exist (`NoSuchBucket`, `ContainerNotFound`).
    MissingBucket,
    /// No credentials were found: object_store asked the EC2 instance metadata service, its
    /// last resort, and that refused or did not answer.
    NoCredentials,
    /// The service refused the credentials (401, 403, `AccessDenied`, ...).
    CredentialsRefused,
    /// The object asked for is not there (404).
    NotFound,
    /// The request itself was refused as invalid (an invalid path, another 4xx answer).
    Rejected,
    /// The network or the server failed (unreachable, a timeout, a 5xx answer).
    Failed,
}

/// The payload of [`Error::Remote`] and [`Error::Http`]: the backend's error and its class.
/// It shows (and chains) as the backend's own error, so [`causes`] lists that error's text
/// as before.
#[derive(Debug)]
pub struct RemoteFailure {
    class: RemoteClass,
    not_found: bool,
    source: ForeignError,
}

impl RemoteFailure {
    /// A failure of class `class` caused by `source` (the backend's error).
    pub fn new(class: RemoteClass, source: ForeignError) -> Self {
        RemoteFailure {
            class,
            not_found: class == RemoteClass::NotFound,
            source,
        }
    }

    /// The same failure, marked as the backend's "not found" answer (a 404) whatever its
    /// class: a 404 naming a missing bucket is of class [`RemoteClass::MissingBucket`] and
    /// still a "not found" to a caller asking whether an object is there.
    pub fn answered_not_found(mut self) -> Self {
        self.not_found = true;
        self
    }

    /// What the failure means.
    pub fn class(&self) -> RemoteClass {
        self.class
    }

    /// True when the backend answered that the object asked for is not there.
    pub fn is_not_found(&self) -> bool {
        self.not_found
    }

    /// The backend's error.
    pub fn foreign(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self.source.as_ref()
    }

    /// The error kind of its class: what the user can fix (a missing bucket, credentials,
    /// a missing object, a refused request) is a user error; the rest is the network's.
    pub fn kind(&self) -> ErrorKind {
        match self.class {
            RemoteClass::MissingBucket
            | RemoteClass::NoCredentials
            | RemoteClass::CredentialsRefused
            | RemoteClass::NotFound
            | RemoteClass::Rejected => ErrorKind::User,
            RemoteClass::Failed => ErrorKind::Io,
        }
    }
}

impl std::fmt::Display for RemoteFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.source.fmt(f)
    }
}

impl std::error::Error for RemoteFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.source()
    }
}

/// Every error this crate returns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No `.dsv/` directory in `start` or any parent, and no `--store`/`DSV_STORE`.
    #[error("no dsv store found in {} or any parent directory", start.display())]
    NoStore {
        /// Where the search began.
        start: PathBuf,
    },
    /// A workspace's store link (its `.dsv` file) names a store that is not there (moved or
    /// deleted).
    #[error("{} is a workspace of the store {}, which is not there (moved or deleted)", workspace.display(), store.display())]
    WorkspaceStoreMissing {
        /// The workspace's directory.
        workspace: PathBuf,
        /// The store its link names (a `.dsv` directory).
        store: PathBuf,
    },
    /// A rebase or pull was killed while workspace `dir` moved to the dataset's new head:
    /// some of its files are at `version`, its record still names the version before.
    #[error("a rebase or pull of {dataset} was interrupted while {} moved to its new head {version}: some of its files are at that version, and dsv still records the one before", dir.display())]
    RebaseInterrupted {
        /// The workspace.
        dir: PathBuf,
        /// The dataset.
        dataset: String,
        /// The version it was moving to (short id).
        version: String,
    },
    /// `init` found a store already at `path`.
    #[error("a dsv store already exists at {}", path.display())]
    StoreExists {
        /// The existing `.dsv` directory.
        path: PathBuf,
    },
    /// The catalog is missing or empty while the store holds data (packs or a ref log): it
    /// was lost, and `dsv repair` rebuilds it.
    #[error("the catalog of the store at {} is lost: {reason}", path.display())]
    CatalogLost {
        /// The catalog file (or the store directory).
        path: PathBuf,
        /// What was found.
        reason: String,
    },
    /// `dsv repair` found other dsv processes using the store.
    #[error("other dsv processes have the store at {} open", path.display())]
    StoreBusy {
        /// The `.dsv` directory.
        path: PathBuf,
    },
    /// A pack (in the store or a remote's `.idx`) whose index version is newer than this dsv
    /// reads: it was written by a newer dsv (`crate::pack::format::INDEX_VERSION`).
    #[error("{} needs a newer dsv: {detail}", path.display())]
    PackTooNew {
        /// The pack or the remote key of its index.
        path: PathBuf,
        /// The version found and the newest this dsv reads.
        detail: String,
    },
    /// The catalog's schema is newer than this build understands.
    #[error(
        "the store at {} was made by a newer dsv (catalog schema {found}, this dsv knows up to {supported})",
        path.display()
    )]
    StoreTooNew {
        /// The catalog file.
        path: PathBuf,
        /// Schema version found in the catalog.
        found: usize,
        /// Newest schema version this build knows.
        supported: usize,
    },
    /// A dataset or tag name that breaks the naming rules.
    #[error("invalid {what} name {name:?}: {reason}")]
    InvalidName {
        /// "dataset" or "tag".
        what: &'static str,
        /// The name as given.
        name: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// A revision string that does not parse.
    #[error("invalid revision {revision:?}: {reason}")]
    InvalidRevision {
        /// The revision as given.
        revision: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No dataset of that name.
    #[error("unknown dataset {name:?}{}", closest.as_ref().map(|c| format!(" (did you mean {c}?)")).unwrap_or_default())]
    DatasetNotFound {
        /// The name as given.
        name: String,
        /// The dataset whose name is closest to it, when one is close (a typo).
        closest: Option<String>,
    },
    /// The dataset exists but nothing matches the revision.
    #[error("unknown revision {revision:?}{}", closest.as_ref().map(|c| format!(" (did you mean {c}?)")).unwrap_or_default())]
    RevisionNotFound {
        /// The revision as given.
        revision: String,
        /// The revision closest to it, when one is close (a typo of a tag: `covid@v1` when
        /// `covid@v01` exists).
        closest: Option<String>,
    },
    /// An id prefix that matches more than one version.
    #[error("revision {revision:?} is ambiguous: it matches {}", candidates.join(", "))]
    AmbiguousRevision {
        /// The revision as given.
        revision: String,
        /// Short ids of the matching versions.
        candidates: Vec<String>,
    },
    /// A path that does not exist inside a version.
    #[error("{revision} has no path {path:?}")]
    PathNotFound {
        /// The revision searched.
        revision: String,
        /// The path as given.
        path: String,
    },
    /// `tag` was asked to create a tag that exists.
    #[error("tag {tag:?} already exists in dataset {dataset:?}")]
    TagExists {
        /// The dataset.
        dataset: String,
        /// The tag.
        tag: String,
    },
    /// A mount point that cannot be used: missing, not a directory, already mounted.
    #[error("cannot mount on {}: {reason}", mountpoint.display())]
    BadMountpoint {
        /// The mount point as given.
        mountpoint: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// FUSE cannot be used here: no `/dev/fuse`, no `fusermount3`, or not permitted.
    #[error("cannot mount {}: FUSE is not available: {reason}", mountpoint.display())]
    FuseUnavailable {
        /// The mount point as given.
        mountpoint: PathBuf,
        /// What is missing or refused.
        reason: String,
    },
    /// A path that must be a directory is not one.
    #[error("{} is not a directory", path.display())]
    NotADirectory {
        /// The path as given.
        path: PathBuf,
    },
    /// A path given on the command line that does not exist.
    #[error("{} does not exist", path.display())]
    NoSuchPath {
        /// The path as given.
        path: PathBuf,
    },
    /// `status` on a directory the store has never committed or checked out.
    #[error("{} is not a workspace of the store at {} (it was never committed or checked out with that store)", path.display(), store.display())]
    NotAWorkspace {
        /// The directory.
        path: PathBuf,
        /// The store's `.dsv` directory.
        store: PathBuf,
    },
    /// `commit` of a directory inside another workspace that holds the same dataset: the new
    /// version would hold only the subdirectory, replacing the whole layout of the dataset,
    /// and the subdirectory would become a second, nested workspace (`--force` allows it).
    #[error(
        "{} is inside {}, a workspace of {dataset}: committing it to {dataset} would make a version holding only this subdirectory (replacing the dataset's whole layout) and a workspace nested in the other",
        dir.display(),
        workspace.display()
    )]
    InsideWorkspace {
        /// The directory to commit.
        dir: PathBuf,
        /// The enclosing workspace's directory.
        workspace: PathBuf,
        /// The dataset both would hold.
        dataset: String,
    },
    /// `init` inside the tree of another store (where commands find that store) or inside a
    /// workspace of one: the new store would be nested in it (`--force` allows it).
    #[error("{}", nested_store_message(dir, store, workspace.as_deref()))]
    NestedStore {
        /// Where the new store was to be created.
        dir: PathBuf,
        /// The enclosing store's `.dsv` directory.
        store: PathBuf,
        /// The workspace of that store holding `dir`, when that is what encloses it.
        workspace: Option<PathBuf>,
    },
    /// `commit` without `--dataset` of a directory that holds no dataset's version.
    #[error("which dataset should {} be committed to? It is not a workspace holding one", dir.display())]
    DatasetRequired {
        /// The directory.
        dir: PathBuf,
    },
    /// A file dsv cannot version (a non-UTF-8 name, a socket, a device, a symlink escaping the tree).
    #[error("cannot version {}: {reason}", path.display())]
    Unsupported {
        /// The offending path.
        path: PathBuf,
        /// Why it is refused.
        reason: String,
    },
    /// A path inside a tree that would escape the checkout directory.
    #[error("unsafe path {path:?} in tree {tree}: {reason}")]
    UnsafePath {
        /// The path as recorded.
        path: String,
        /// The tree that holds it.
        tree: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// Checkout would overwrite or delete changes that were never committed.
    #[error(
        "checkout would overwrite {total} uncommitted change(s) in {}: {}",
        dir.display(),
        paths.join(", ")
    )]
    Conflict {
        /// The checkout directory.
        dir: PathBuf,
        /// Up to ten of the paths concerned.
        paths: Vec<String>,
        /// How many paths in all.
        total: usize,
    },
    /// A checkout needs more room than the file system of its directory has: checked before
    /// anything is written.
    #[error(
        "the checkout into {} needs {} ({needed_bytes} bytes) and {needed_inodes} inodes, and its file system has {} ({free_bytes} bytes) and {free_inodes} inodes free",
        dir.display(),
        gibibytes(*needed_bytes),
        gibibytes(*free_bytes)
    )]
    NoSpace {
        /// The checkout directory.
        dir: PathBuf,
        /// Bytes the files to write take, each rounded up to whole 4 KiB blocks.
        needed_bytes: u64,
        /// Files, symlinks and directories to make.
        needed_inodes: u64,
        /// Bytes free to an unprivileged user (`statvfs`: `f_bavail` × `f_frsize`).
        free_bytes: u64,
        /// Inodes free to an unprivileged user (`f_favail`; a file system that reports no
        /// inode count at all is not checked on inodes).
        free_inodes: u64,
    },
    /// A partial checkout (`--shard`, `--include`, `--files-from`) into a directory that
    /// holds a checkout or commit of its own.
    #[error(
        "{} is a workspace (it holds {dataset}); a partial checkout goes into a directory of its own",
        dir.display()
    )]
    PartialCheckoutIntoWorkspace {
        /// The directory.
        dir: PathBuf,
        /// The dataset the directory holds.
        dataset: String,
    },
    /// Stored data failed a hash or format check.
    #[error("corrupt data in {}: {detail}", path.display())]
    Corrupt {
        /// The pack, catalog or file concerned.
        path: PathBuf,
        /// What check failed.
        detail: String,
    },
    /// The catalog names an object that it cannot locate.
    #[error("object {id} ({what}) is missing from the store")]
    MissingObject {
        /// The object's id.
        id: String,
        /// "chunk", "tree", "file map" or "version".
        what: &'static str,
    },
    /// An I/O error on a named path.
    #[error("I/O error on {}", path.display())]
    Io {
        /// The file or directory (always a path: an I/O error with no file to name is an
        /// [`Error::IoOperation`] or an [`Error::SourceIo`]).
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// An I/O error of an operation that has no file to name: writing to the output stream
    /// a caller gave, starting a worker thread or the async runtime, setting up a
    /// compressor.
    #[error("I/O error {operation}")]
    IoOperation {
        /// What was being done, worded to follow "I/O error " ("writing the output",
        /// "starting a worker thread").
        operation: &'static str,
        /// The operating system's error.
        source: io::Error,
    },
    /// An import source that failed while it was read: it broke off part-way, stalled,
    /// outlasted `--timeout`, or ended before the size its listing gave.
    #[error("I/O error on {}", crate::redact::text(url))]
    SourceIo {
        /// The source's URL or path, as given.
        url: String,
        /// What went wrong (`TimedOut` for a stall or the timeout, `UnexpectedEof` for an
        /// early end).
        source: io::Error,
    },
    /// A broken invariant: a bug in dsv.
    #[error("internal error: {detail}")]
    Internal {
        /// What was found.
        detail: String,
    },
    /// An error from the catalog's database, classified by the layer that owns it (the
    /// store crate, for SQLite's codes: [`CatalogFailure`]).
    #[error("{}", .0.message())]
    Catalog(#[source] CatalogFailure),
    /// The catalog's schema could not be brought up to date (the migration library's error).
    #[error("catalog migration failed")]
    Migration(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// No remote of that name.
    #[error("unknown remote {name:?}")]
    RemoteNotFound {
        /// The name as given.
        name: String,
    },
    /// No remote was named and the store has none to default to.
    #[error("this store has no remote; add one with `dsv remote add origin URL`")]
    NoRemote,
    /// No remote was named and the store has several, none of them called `origin`.
    #[error("this store has several remotes and none is called origin; pass --remote NAME")]
    AmbiguousRemote {
        /// The remotes' names.
        names: Vec<String>,
    },
    /// `clone URL` without a directory, and the URL's last path element names no new
    /// directory (`.`, `..`, nothing, `.dsv`, a `file:///` URL's scheme).
    #[error(
        "cannot name a directory after {:?} (its last path element is {name:?}); give one: dsv clone URL DIR",
        crate::redact::text(url)
    )]
    CloneDirUnnamed {
        /// The URL as given.
        url: String,
        /// Its last path element.
        name: String,
    },
    /// `remote add` with a name already in use.
    #[error("a remote named {name:?} already exists")]
    RemoteExists {
        /// The name.
        name: String,
    },
    /// A remote URL dsv cannot use, or a setting it refuses (credentials, unknown keys).
    #[error(
        "invalid remote {what} {:?}: {}",
        crate::redact::text(value),
        crate::redact::text(reason)
    )]
    InvalidRemote {
        /// "URL" or "option".
        what: &'static str,
        /// The URL or option key as given.
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// A request to a remote failed (after the backend's retries).
    #[error(
        "remote {:?}: {} failed",
        crate::redact::text(remote),
        crate::redact::text(action)
    )]
    Remote {
        /// The remote's name or URL.
        remote: String,
        /// What dsv was doing ("list packs/", "upload packs/….pack").
        action: String,
        /// The backend's error, classified by the remote crate.
        source: RemoteFailure,
    },
    /// `push NAME@REV` of a version older than the remote's head on the same line.
    #[error(
        "{dataset}@{version} is behind the head of {dataset:?} on remote {remote:?}: pushing it would move that head back"
    )]
    PushBehind {
        /// The remote.
        remote: String,
        /// The dataset.
        dataset: String,
        /// The pushed version (short id).
        version: String,
    },
    /// A remote whose format (its `format` key, written by `dsv gc --remote`) is newer than
    /// this dsv knows: writing to it could break rules its newer writers follow.
    #[error(
        "remote {remote:?} has format {found}, newer than the format {known} this dsv knows: upgrade dsv to write to it"
    )]
    RemoteFormatTooNew {
        /// The remote.
        remote: String,
        /// The format the remote's `format` key names.
        found: u32,
        /// The newest format this dsv knows.
        known: u32,
    },
    /// A writer's final check found that a `dsv gc --remote` marked packs it relies on,
    /// after several tries (or too late to send their objects again).
    #[error(
        "a gc of remote {remote:?} marked packs this {operation} relies on while it ran: run it again (it sends only what is missing)"
    )]
    RemoteCollected {
        /// The remote.
        remote: String,
        /// What was writing (`push`, `copy`).
        operation: &'static str,
    },
    /// A push that would drop versions from the remote, or lost a race with another writer.
    #[error("remote {remote:?} has versions of {dataset:?} you do not have: pull first")]
    RemoteDiverged {
        /// The remote.
        remote: String,
        /// The dataset.
        dataset: String,
    },
    /// `rebase`: the dataset's head and the version to rebase onto share no version, so
    /// there is no common ancestor to compare their changes with.
    #[error("{dataset:?} and {onto} have no version in common: there is nothing to rebase onto")]
    NoCommonVersion {
        /// The dataset rebased.
        dataset: String,
        /// The version (as named) it was to be rebased onto.
        onto: String,
    },
    /// `rebase`: the dataset's head moved (another commit, pull or reset) while the rebase
    /// was being prepared; nothing was recorded.
    #[error("the head of {dataset:?} moved while the rebase was prepared; nothing was recorded")]
    HeadMoved {
        /// The dataset.
        dataset: String,
    },
    /// `rebase` (or `pull --rebase`) stopped at paths both lines changed: nothing was
    /// changed. The command's report lists the paths; this error is what it exits with.
    #[error("cannot rebase {dataset} onto {onto}: {conflicts} path(s) changed on both sides")]
    RebaseConflicts {
        /// The dataset rebased.
        dataset: String,
        /// The version (as named) it was to be rebased onto.
        onto: String,
        /// How many paths conflict.
        conflicts: usize,
        /// True when `--ours` or `--theirs` settles every conflict (each is a path both lines
        /// changed); false when one is a file on one side where the other has entries below
        /// it, which no side settles.
        one_side_settles: bool,
    },
    /// `rm` refused: the version must be kept.
    #[error("cannot remove version {version}: {}", Holder::describe(holders))]
    VersionHeld {
        /// Short id of the version.
        version: String,
        /// What holds it, each holder once.
        holders: Vec<Holder>,
    },
    /// A path of a version that is a directory or symlink where a regular file is needed.
    #[error("{path:?} in {revision} is {kind}, not a regular file")]
    NotAFile {
        /// The revision.
        revision: String,
        /// The path.
        path: String,
        /// "a directory" or "a symlink".
        kind: &'static str,
    },
    /// A glob pattern that does not parse.
    #[error("invalid pattern {pattern:?}: {reason}")]
    InvalidPattern {
        /// The pattern as given.
        pattern: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A `.dsvignore` file that cannot be read whole: a line that is not UTF-8 or a rule
    /// that does not parse. Nothing goes on with part of its rules (what it meant to leave
    /// out could be committed).
    #[error("cannot obey ignore file {}, line {line}: {reason}", path.display())]
    InvalidIgnoreFile {
        /// The ignore file.
        path: PathBuf,
        /// The line (from 1) that cannot be used; 0 when the file cannot be read at all.
        line: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// A `--shard I/N` that does not parse or is out of range.
    #[error("invalid shard {spec:?}: {reason}")]
    InvalidShard {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `--include` patterns that match no file of the version (a typo, most often).
    #[error("no file of {revision} matches {}", patterns.iter().map(|p| format!("--include {p:?}")).collect::<Vec<_>>().join(", "))]
    NothingMatches {
        /// The revision.
        revision: String,
        /// The patterns that match nothing.
        patterns: Vec<String>,
    },
    /// Paths a manifest (`--files-from`) lists that the version does not have.
    #[error("{} paths of the list are not files of {revision}: {}", paths.len(), paths.iter().take(5).cloned().collect::<Vec<_>>().join(", "))]
    PathsNotFound {
        /// The revision.
        revision: String,
        /// The paths (all of them).
        paths: Vec<String>,
    },
    /// A byte range that starts at or past the end of a file (HTTP's 416).
    #[error("range starts at byte {start}, but {path:?} has {size} bytes")]
    RangeNotSatisfiable {
        /// The file.
        path: String,
        /// The range's first byte.
        start: u64,
        /// The file's size in bytes.
        size: u64,
    },
    /// A workspace holds a version that was removed since (`dsv rm`): nothing to compare with.
    #[error("{} holds version {}, which was removed", dir.display(), &version[..12.min(version.len())])]
    WorkspaceVersionRemoved {
        /// The workspace directory.
        dir: PathBuf,
        /// The removed version's id.
        version: String,
    },
    /// `rename` onto a name that already has versions.
    #[error("dataset {name:?} already exists")]
    DatasetExists {
        /// The name.
        name: String,
    },
    /// A version holds more files than can be listed whole in the memory there is
    /// ([`crate::object::servable_files`]): refused when a remote's version is fetched, by
    /// the machine's memory ([`crate::object::check_servable`]), and before a command lists
    /// one whole (`shards`, `--shard`, `mount`, the Python package), by the memory this
    /// process may use ([`crate::object::check_listable`]), rather than aborting on a failed
    /// allocation.
    #[error(
        "version {version} holds {files} files; with {} of memory (the smallest of the machine's memory, its cgroup's limit and, when listing, this process's ulimit -v and -d) dsv lists versions of at most {limit} files whole (a listing takes about {} bytes an entry)",
        gibibytes(*memory),
        crate::object::LISTED_BYTES_PER_ENTRY
    )]
    VersionTooLarge {
        /// The version id.
        version: String,
        /// Files it claims.
        files: u64,
        /// The most this process lists whole.
        limit: u64,
        /// The memory this process may use, in bytes.
        memory: u64,
    },
    /// The version was removed (`dsv rm`); its data may be gone.
    #[error("version {version} was removed; its data is no longer kept")]
    VersionRemoved {
        /// The version id.
        version: String,
    },
    /// A lock file that cannot be used.
    #[error("invalid lock file {}: {reason}", path.display())]
    InvalidLock {
        /// The lock file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A lineage record (`dsv-lineage.json`, `dsv audit --lineage`) that cannot be read: not
    /// a regular file, too long, not JSON of schema `dsv.lineage/1`, or fields of the wrong
    /// shape. (A well-formed record that does not match the store is an audit finding, not
    /// this error.)
    #[error("invalid lineage record {}: {reason}", path.display())]
    InvalidLineage {
        /// The record's file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A lock file pins a version this store does not have and no configured remote supplies.
    #[error("the lock pins version {version} of {dataset:?}, which this store does not have")]
    LockedVersionUnknown {
        /// The dataset.
        dataset: String,
        /// The pinned version id.
        version: String,
        /// The remote URLs the lock names.
        remotes: Vec<String>,
    },
    /// An import source (object, prefix, URL or path) that does not exist.
    #[error("{}: {}", crate::redact::text(url), crate::redact::text(detail))]
    SourceNotFound {
        /// The source's URL or path.
        url: String,
        /// What is missing ("no such object", "no version … of it").
        detail: String,
    },
    /// `--etag` given and the object's ETag differs.
    #[error(
        "{} has ETag {actual}, not the {expected} the import is pinned to",
        crate::redact::text(url)
    )]
    EtagMismatch {
        /// The object's URL.
        url: String,
        /// The ETag asked for.
        expected: String,
        /// The ETag the server reports.
        actual: String,
    },
    /// A source object changed between its listing and its read (`If-Match` failed).
    #[error("{} changed while it was being imported", crate::redact::text(url))]
    SourceChanged {
        /// The object's URL.
        url: String,
    },
    /// An import asked for something its source cannot do (a pin on a prefix, extraction of
    /// a file that is no archive, a dataset name the source's name cannot give).
    #[error(
        "cannot import {}: {}",
        crate::redact::text(source_url),
        crate::redact::text(reason)
    )]
    InvalidImport {
        /// The source as given.
        source_url: String,
        /// What is wrong.
        reason: String,
    },
    /// An archive member that dsv refuses (a path escaping the dataset, a link pointing out).
    #[error("{}: refused entry {member:?}: {reason}", crate::redact::text(url))]
    UnsafeArchive {
        /// The archive's URL.
        url: String,
        /// The member's name as recorded in the archive.
        member: String,
        /// Why it is refused.
        reason: String,
    },
    /// An archive that cannot be read to its end (truncated, corrupt, not the format its
    /// name says), or that expands beyond the configured limits (a zip bomb).
    #[error("{}: {}", crate::redact::text(url), crate::redact::text(detail))]
    BadArchive {
        /// The archive's URL.
        url: String,
        /// What is wrong.
        detail: String,
    },
    /// An HTTP(S) request of an import failed.
    #[error("{}: {} failed", crate::redact::text(url), crate::redact::text(action))]
    Http {
        /// The URL.
        url: String,
        /// What dsv was doing.
        action: String,
        /// The client's error, classified by the remote crate.
        source: RemoteFailure,
    },
    /// `dsv update` on a dataset whose head was not made by `dsv import`.
    #[error("the head of {dataset:?} was not imported, so it has no source to re-check")]
    NotImported {
        /// The dataset.
        dataset: String,
    },
    /// The operation was interrupted (Ctrl-C); what was done is consistent, a re-run finishes it.
    #[error("interrupted")]
    Interrupted,
    /// A read asked every remote in the read order for data this store lacks, and at least
    /// one failed (the others failed too, or lacked the data). Its message, causes and kind
    /// are those of the first failure in read order; its hints add which remotes were
    /// tried.
    #[error(transparent)]
    RemotesFailed(Box<RemotesFailed>),
    /// The AWS profile the user named (`AWS_PROFILE`) is in neither AWS file.
    #[error("AWS profile {profile:?} is not in {}", if files.is_empty() { "any file (no HOME, AWS_CONFIG_FILE or AWS_SHARED_CREDENTIALS_FILE)".to_string() } else { files.join(" or ") })]
    AwsProfileNotFound {
        /// The profile's name.
        profile: String,
        /// The files read (the config file, then the credentials file), each marked
        /// "(not found)" when it does not exist.
        files: Vec<String>,
    },
    /// An AWS config or credentials file that is too large, not text, or does not parse.
    #[error("cannot read the AWS profile file {}{}: {reason}", path.display(), line.map(|l| format!(", line {l}")).unwrap_or_default())]
    AwsProfileFile {
        /// The file.
        path: PathBuf,
        /// The line (from 1) where parsing failed, when it did.
        line: Option<usize>,
        /// What is wrong.
        reason: String,
    },
    /// The AWS profile gets its credentials in a way dsv does not support (a process, SSO,
    /// an assumed role), and the environment gives none.
    #[error("AWS profile {profile:?} gets its credentials by {how}, which dsv does not support")]
    AwsProfileUnsupported {
        /// The profile's name.
        profile: String,
        /// The setting that says how (`credential_process`, `sso_session`, `role_arn` …).
        how: String,
    },
    /// The store's settings file (`.dsv/config.toml`) is too large or does not parse, or
    /// holds an unknown key or a bad value.
    #[error("invalid store settings in {}{}: {reason}", path.display(), line.map(|l| format!(", line {l}")).unwrap_or_default())]
    InvalidConfig {
        /// The file.
        path: PathBuf,
        /// The line (from 1) of the problem, when known.
        line: Option<usize>,
        /// What is wrong.
        reason: String,
    },
    /// `dsv config` with a key that is not a setting.
    #[error("unknown setting {key:?}; the settings are {}", known.join(", "))]
    UnknownSetting {
        /// The key as given.
        key: String,
        /// Every known key.
        known: Vec<&'static str>,
    },
    /// `dsv config set` with a value the setting does not take.
    #[error("invalid value {value:?} for {key}: {reason}")]
    InvalidSetting {
        /// The setting.
        key: &'static str,
        /// The value as given.
        value: String,
        /// What it takes.
        reason: String,
    },
}

/// What keeps a version from `dsv rm` ([`Error::VersionHeld`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// It is the head of `dataset` (only the whole dataset can be removed).
    Head {
        /// The dataset.
        dataset: String,
    },
    /// Tags name it (`--force` drops them).
    Tags {
        /// The dataset.
        dataset: String,
        /// The tags.
        tags: Vec<String>,
    },
    /// A pin (`dsv unpin`).
    Pin {
        /// The pin's reason.
        reason: String,
    },
    /// A workspace holds it (`dsv workspace forget`).
    Workspace {
        /// The directory.
        path: String,
    },
}

impl Holder {
    /// The words of [`Error::VersionHeld`] for `holders`: each reason, the workspaces
    /// together, joined by `; `.
    pub fn describe(holders: &[Holder]) -> String {
        let mut parts: Vec<String> = Vec::new();
        for holder in holders {
            match holder {
                Holder::Head { dataset } => parts.push(format!(
                    "it is the head of {dataset}; remove the whole dataset with `dsv rm {dataset}`"
                )),
                Holder::Tags { tags, .. } => parts.push(format!(
                    "it is tagged {} (--force drops the tags)",
                    tags.join(", ")
                )),
                Holder::Pin { reason } => parts.push(format!("it is pinned ({reason})")),
                Holder::Workspace { .. } => {}
            }
        }
        let workspaces: Vec<&str> = holders
            .iter()
            .filter_map(|h| match h {
                Holder::Workspace { path } => Some(path.as_str()),
                Holder::Head { .. } | Holder::Tags { .. } | Holder::Pin { .. } => None,
            })
            .collect();
        if !workspaces.is_empty() {
            parts.push(format!(
                "the workspace{} {} hold{} it",
                if workspaces.len() > 1 { "s" } else { "" },
                workspaces.join(", "),
                if workspaces.len() > 1 { "" } else { "s" },
            ));
        }
        parts.join("; ")
    }
}

/// What [`Error::RemotesFailed`] holds: the first remote's failure, and every remote asked.
#[derive(Debug)]
pub struct RemotesFailed {
    /// The failure of the first remote (in read order) that failed.
    pub first: Error,
    /// Every remote asked, in the order asked, each with what happened: `None` when it
    /// served what it held (or held none of it), else its failure in words.
    pub tried: Vec<(String, Option<String>)>,
}

impl std::fmt::Display for RemotesFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.first.fmt(f)
    }
}

impl std::error::Error for RemotesFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.first)
    }
}

impl RemotesFailed {
    /// The hint naming the remotes tried besides the first failure.
    fn hint(&self) -> String {
        let tried: Vec<String> = self
            .tried
            .iter()
            .map(|(name, failure)| match failure {
                Some(failure) => format!("{name:?} failed ({})", crate::redact::text(failure)),
                None => format!("{name:?} did not hold it"),
            })
            .collect();
        format!(
            "the remotes were tried in read order: {}; `dsv remote ls` shows the order and `dsv remote order NAME` changes it",
            tried.join(", ")
        )
    }
}

/// Where an error's hint comes from, in the table ([`Error::facts`]).
enum Hint {
    /// It has none.
    No,
    /// This text.
    Text(&'static str),
    /// Worded from the error's fields ([`Error::worded_hint`]).
    Worded,
}

/// What the table ([`Error::facts`]) states of one error.
struct Facts {
    /// Its kind (the CLI's exit code).
    kind: ErrorKind,
    /// The Python exception class (in `dsv.errors`); `None`: the class of its kind
    /// ([`ErrorKind::python_class`]).
    python_class: Option<&'static str>,
    /// Its hint, or how it is worded.
    hint: Hint,
}

/// The hint of an internal error ([`ErrorKind::Internal`]).
const BUG_HINT: &str = "this is a bug in dsv, not a problem with your data: please report it with the command you ran; `dsv verify` checks the store";

/// The hint of an error that a full disk caused, whatever its variant.
const DISK_FULL_HINT: &str = "free some disk space and run the command again; nothing was recorded";

/// The hint of damage in this store.
const VERIFY_HINT: &str =
    "run `dsv verify` to check the whole store; the data must be restored from another copy";

impl Error {
    /// The one table of errors: per variant, its kind, its Python class and its hint (the
    /// text, or that it is worded from the fields). [`Error::kind`], [`Error::python_class`]
    /// and [`Error::hints`] read it; every variant is listed (no wildcard arm), so a new one
    /// does not compile until its row is written.
    #[rustfmt::skip]
    fn facts(&self) -> Facts {
        use ErrorKind::{Conflict, Corrupt, Internal, Interrupted, Io, User};
        use Hint::{No, Text, Worded};
        let (kind, python_class, hint) = match self {
            Error::NoStore { .. } => (User, Some("NoStore"), Text("run `dsv init` to create a store here, or pass --store PATH / set DSV_STORE")),
            Error::WorkspaceStoreMissing { .. } => (User, Some("NoStore"), Worded),
            Error::RebaseInterrupted { .. } => (User, None, Worded),
            Error::StoreExists { .. } => (User, Some("StoreExists"), No),
            Error::CatalogLost { .. } => (Corrupt, Some("CatalogLost"), Text("run `dsv repair` to rebuild the catalog from the packs and the ref log; nothing has been deleted")),
            Error::StoreBusy { .. } => (User, Some("StoreBusy"), Text("stop them (or wait for them to finish: a mount, a training job, a long checkout) and run `dsv repair` again; nothing was changed")),
            Error::StoreTooNew { .. } => (User, Some("StoreTooNew"), Text("upgrade dsv to open this store")),
            Error::PackTooNew { .. } => (User, None, Text("upgrade dsv to read this store or remote: its packs hold data in a format this dsv does not know")),
            Error::InvalidName { .. } => (User, Some("InvalidName"), No),
            Error::InvalidRevision { .. } => (User, Some("InvalidRevision"), No),
            Error::DatasetNotFound { .. } => (User, Some("UnknownDataset"), Worded),
            Error::RevisionNotFound { .. } => (User, Some("UnknownRevision"), Worded),
            Error::AmbiguousRevision { .. } => (User, Some("AmbiguousRevision"), Worded),
            Error::PathNotFound { .. } => (User, Some("PathNotFound"), No),
            Error::TagExists { .. } => (User, Some("TagExists"), Text("choose another tag, or move this one with `dsv tag REV TAG --force`")),
            Error::BadMountpoint { .. } => (User, None, Text("mount on an existing, empty directory that nothing is mounted on (`mkdir -p DIR`); `fusermount3 -u DIR` releases a mount that is there, a dead one too")),
            Error::FuseUnavailable { .. } => (Io, None, Text("install FUSE 3 (`apt-get install fuse3`, `dnf install fuse3`) and make sure /dev/fuse exists (in a container: `--device /dev/fuse --cap-add SYS_ADMIN`), or read the version without a mount: `dsv export REV | tar -x -C DIR` or `dsv checkout REV DIR`")),
            Error::NotADirectory { .. } => (User, Some("NotADirectory"), Worded),
            Error::NoSuchPath { .. } => (User, None, Text("check the path (it is relative to the current directory)")),
            Error::NotAWorkspace { .. } => (User, Some("NotAWorkspace"), Text("`dsv checkout REV DIR` or `dsv commit DIR -d DATASET` makes it one; `dsv workspace ls` lists this store's workspaces (--store PATH or DSV_STORE picks another store)")),
            Error::InsideWorkspace { .. } => (User, Some("InsideWorkspace"), Worded),
            Error::NestedStore { .. } => (User, None, Worded),
            Error::DatasetRequired { .. } => (User, None, Worded),
            Error::Unsupported { .. } => (User, Some("Unsupported"), No),
            Error::UnsafePath { .. } => (Corrupt, Some("UnsafePath"), No),
            Error::Conflict { .. } => (Conflict, Some("Conflict"), Text("commit those changes first, or pass --force to overwrite them (they will be lost)")),
            Error::NoSpace { .. } => (Io, None, Text("free space (or inodes) there, or check out into a directory on a larger file system; a partial checkout (--include, --shard) writes less")),
            Error::PartialCheckoutIntoWorkspace { .. } => (Conflict, None, Text("check out the subset into an empty or new directory (`dsv workspace forget DIR` lets the workspace go, leaving its files)")),
            Error::Corrupt { .. } => (Corrupt, Some("Corrupt"), Worded),
            Error::MissingObject { .. } => (Corrupt, Some("MissingObject"), Text(VERIFY_HINT)),
            Error::Io { .. } | Error::IoOperation { .. } | Error::SourceIo { .. } => (Io, None, No),
            Error::Internal { .. } => (Internal, None, Text(BUG_HINT)),
            Error::Catalog(failure) => (failure.kind(), None, if failure.class() == CatalogClass::Bug { Text(BUG_HINT) } else { No }),
            Error::Migration(_) => (Corrupt, None, No),
            Error::RemoteNotFound { .. } => (User, Some("UnknownRemote"), Text("`dsv remote ls` lists the remotes")),
            Error::NoRemote | Error::AmbiguousRemote { .. } | Error::CloneDirUnnamed { .. } => (User, None, No),
            Error::RemoteExists { .. } => (User, Some("RemoteExists"), No),
            Error::InvalidRemote { .. } => (User, Some("InvalidRemote"), No),
            Error::Remote { source, .. } => (source.kind(), Some("RemoteError"), Worded),
            Error::PushBehind { .. } => (Conflict, None, Worded),
            Error::RemoteFormatTooNew { .. } => (User, None, Text("a newer dsv wrote this remote's rules (format 2: `dsv gc --remote` collects it, and an older dsv could push data that collection deletes; format 3: its packs may hold delta frames); upgrade dsv")),
            Error::RemoteCollected { .. } => (Conflict, None, Text("nothing a ref names was lost; run the command again")),
            Error::RemoteDiverged { .. } => (Conflict, Some("RemoteDiverged"), Worded),
            Error::NoCommonVersion { .. } => (User, None, Worded),
            Error::HeadMoved { .. } => (Conflict, None, Worded),
            Error::RebaseConflicts { .. } => (Conflict, None, Worded),
            Error::VersionHeld { .. } => (User, Some("VersionHeld"), Worded),
            Error::NotAFile { .. } => (User, Some("NotAFile"), Worded),
            Error::InvalidPattern { .. } => (User, Some("InvalidPattern"), No),
            Error::InvalidIgnoreFile { .. } => (User, None, Text("fix that line (UTF-8 text, one gitignore-style rule a line) and run the command again; dsv obeys an ignore file whole, never part of it, so nothing was recorded")),
            Error::InvalidShard { .. } => (User, Some("InvalidShard"), No),
            Error::NothingMatches { .. } => (User, None, Worded),
            Error::PathsNotFound { .. } => (User, Some("PathNotFound"), No),
            Error::RangeNotSatisfiable { .. } => (User, Some("RangeNotSatisfiable"), No),
            Error::WorkspaceVersionRemoved { .. } => (User, None, Text("check out another version into it (`dsv checkout REV DIR`), commit it as a new version, or `dsv workspace forget DIR`")),
            Error::DatasetExists { .. } => (User, None, Worded),
            Error::VersionTooLarge { .. } => (User, None, Text("run it where more memory may be used (a larger machine, a higher `ulimit -v` or cgroup limit), or split the dataset into smaller versions; `dsv ls`, `cat` and `checkout` stream and need no whole listing")),
            Error::VersionRemoved { .. } => (User, Some("VersionRemoved"), Text("removal cannot be undone in this store; `dsv log NAME` shows the versions that remain, and another store or a clone of a remote that holds it can still check it out")),
            Error::InvalidLock { .. } | Error::InvalidLineage { .. } => (User, None, No),
            Error::LockedVersionUnknown { .. } => (User, None, Worded),
            Error::SourceNotFound { .. } => (User, None, Text("check the URL and, for object storage, the endpoint and credentials (AWS_ENDPOINT_URL, AWS_*, AZURE_*, GOOGLE_* environment variables); nothing was imported")),
            Error::EtagMismatch { .. } => (User, None, Text("the object is not the one the import was pinned to, and nothing was imported: drop --etag to take the current object, or pin an older one of a versioned bucket with --version-id")),
            Error::SourceChanged { .. } => (User, None, Text("nothing was imported; run the command again to import the object as it is now")),
            Error::InvalidImport { .. } => (User, None, No),
            Error::UnsafeArchive { .. } => (User, None, Text("nothing was imported: dsv never stores a path that leaves the dataset; fix the archive at its source")),
            Error::BadArchive { .. } => (User, None, Text("nothing was imported; check the archive (`tar tvf`, `unzip -t`), or raise --max-expansion-ratio / --max-expanded-size if it is genuine")),
            Error::Http { source, .. } => (source.kind(), None, Text("check the URL and the network; nothing was imported, and a re-run starts again")),
            Error::NotImported { .. } => (User, None, Worded),
            Error::Interrupted => (Interrupted, Some("Interrupted"), Text("the store is consistent; run the command again to finish")),
            // The first failure's row; `hints` adds which remotes were tried.
            Error::RemotesFailed(failed) => return failed.first.facts(),
            Error::AwsProfileNotFound { .. } => (User, None, Worded),
            Error::AwsProfileFile { .. } => (User, None, Text("fix the file (the format is the AWS CLI's: https://docs.aws.amazon.com/cli/latest/userguide/cli-configure-files.html), or point AWS_CONFIG_FILE / AWS_SHARED_CREDENTIALS_FILE elsewhere")),
            Error::AwsProfileUnsupported { .. } => (User, None, Worded),
            Error::InvalidConfig { .. } => (User, None, Text("fix or remove that line of the file (`dsv config --help` lists the settings); commands that read the settings fail until then")),
            Error::UnknownSetting { .. } | Error::InvalidSetting { .. } => (User, None, Text("`dsv config --help` lists the settings and the values they take")),
        };
        Facts { kind, python_class, hint }
    }

    /// The group this error belongs to (decides the CLI's exit code), from the table
    /// (`Error::facts`).
    pub fn kind(&self) -> ErrorKind {
        self.facts().kind
    }

    /// The class (in the Python package's `dsv.errors`) this error is raised as, from the
    /// table (`Error::facts`): its own class, or the class of its kind
    /// ([`ErrorKind::python_class`]).
    pub fn python_class(&self) -> &'static str {
        let facts = self.facts();
        facts
            .python_class
            .unwrap_or_else(|| facts.kind.python_class())
    }

    /// Creates an [`Error::Corrupt`].
    pub fn corrupt(path: impl Into<PathBuf>, detail: impl Into<String>) -> Self {
        Error::Corrupt {
            path: path.into(),
            detail: detail.into(),
        }
    }

    /// True when the underlying cause is a full disk (ENOSPC, or a catalog failure its
    /// crate classed as [`CatalogClass::DiskFull`]). A [`Error::NoSpace`] is checked before
    /// anything is written: the disk is not full yet.
    pub fn is_disk_full(&self) -> bool {
        match self {
            Error::Io { source, .. }
            | Error::IoOperation { source, .. }
            | Error::SourceIo { source, .. } => is_full_disk_io(source),
            Error::Catalog(failure) => failure.class() == CatalogClass::DiskFull,
            Error::RemotesFailed(failed) => failed.first.is_disk_full(),
            // The only variants that carry an I/O error or a database's are above.
            _ => false,
        }
    }

    /// What the user can do about the error: none, or one hint (the CLI prints each after
    /// `hint: `, `--json` lists them, the Python package's exceptions carry them in `hints`).
    /// Hints are worded for the command line: they name `dsv` commands and flags.
    ///
    /// A full disk and a path too long come first, whatever the variant; then the table's
    /// hint (`Error::facts`). A [`Error::NotADirectory`] naming a file asks the file system
    /// whether it is one (the hint then suggests `dsv import`).
    pub fn hints(&self) -> Vec<String> {
        if let Error::RemotesFailed(failed) = self {
            let mut hints = failed.first.hints();
            hints.push(failed.hint());
            return hints;
        }
        if self.is_disk_full() {
            return vec![DISK_FULL_HINT.into()];
        }
        if let Error::Io { source, .. } = self
            && source.kind() == io::ErrorKind::InvalidFilename
        {
            return vec!["the path is longer than the operating system allows (4096 bytes in all, 255 a name): use a directory with a shorter path".into()];
        }
        match self.facts().hint {
            Hint::No => Vec::new(),
            Hint::Text(text) => vec![text.into()],
            Hint::Worded => self.worded_hint().into_iter().collect(),
        }
    }

    /// The hint of a variant whose row says [`Hint::Worded`]: worded from its fields (none
    /// when the fields leave nothing to suggest).
    fn worded_hint(&self) -> Option<String> {
        let hint = match self {
            Error::RebaseInterrupted { dir, dataset, version } => format!(
                "finish the move first: `dsv checkout {dataset}@{version} {}` (or run the rebase again); it keeps the files already there and carries your uncommitted changes over, then commit",
                dir.display()
            ),
            Error::WorkspaceStoreMissing { workspace, .. } => format!(
                "pass --store PATH (or set DSV_STORE) naming the store where it is now; a checkout or commit here with it links this workspace to it again (a new store here would be a second, empty one; delete {}/.dsv only to stop using that store)",
                workspace.display()
            ),
            Error::DatasetNotFound { closest: Some(closest), .. } => {
                format!("did you mean {closest}? `dsv ls` lists the datasets")
            }
            Error::DatasetNotFound { .. } => {
                "`dsv ls` lists the datasets (`dsv commit DIR -d NAME` makes one)".into()
            }
            Error::RevisionNotFound { revision, closest } => revision_hint(revision, closest.as_deref()),
            Error::AmbiguousRevision { revision, .. } => {
                let dataset = revision.split('@').next().unwrap_or(revision);
                format!("`dsv log {dataset}` lists its versions and tags")
            }
            Error::NothingMatches { revision, .. } => format!(
                "`dsv ls {revision}` lists its files; a pattern matches whole paths ('train/**', '*.png' only at the top level: '**/*.png' anywhere); quote it so the shell does not expand it"
            ),
            Error::NotADirectory { path } if path.is_file() => format!(
                "a directory is needed here; to version a single file, `dsv import {} -d NAME` makes a version holding it",
                path.display()
            ),
            Error::NotAFile { revision, path, kind: "a directory" } => {
                format!("`dsv ls {revision}:{path}` lists the directory")
            }
            Error::DatasetExists { name } => format!(
                "choose a name `dsv ls` does not list, or remove {name}'s versions with `dsv rm {name}` first"
            ),
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
            // What came from a remote names it ("remote origin", "origin:packs/..."): a
            // string test, as `Path::starts_with` compares whole components and "remote
            // origin" is one.
            Error::Corrupt { path, .. } => {
                let path = path.to_string_lossy();
                if path.starts_with("remote ") || path.contains(":packs/") || path.contains(":refs/") {
                    "the remote's copy is damaged or wrong, and nothing of it was kept here: fetch from another remote, or push again from a store that holds the data".into()
                } else {
                    VERIFY_HINT.into()
                }
            }
            Error::LockedVersionUnknown { remotes, .. } => match remotes.first() {
                Some(remote) => format!(
                    "add a remote the lock names and run again: `dsv remote add origin {remote}`"
                ),
                None => "the lock names no remote: push the version from the store that made the lock, or use that store".into(),
            },
            Error::VersionHeld { holders, .. } => held_hint(holders),
            Error::RebaseConflicts { onto, one_side_settles, .. } => rebase_conflicts_hint(onto, *one_side_settles),
            _ => return self.sync_hint(),
        };
        Some(hint)
    }

    /// [`Error::worded_hint`] for errors of remotes, sync and settings.
    fn sync_hint(&self) -> Option<String> {
        let hint = match self {
            Error::NotImported { dataset } => format!(
                "`dsv import SOURCE --dataset {dataset}` records a source to update from; a committed dataset changes with `dsv commit`"
            ),
            Error::PushBehind {
                dataset, remote, ..
            } => format!(
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
            Error::AwsProfileUnsupported { profile, .. } => format!(
                "export the profile's credentials into the environment: eval \"$(aws configure export-credentials --profile {profile} --format env)\""
            ),
            Error::Remote { source, action, .. } => remote_hint(source.class(), action).into(),
            _ => return None,
        };
        Some(hint)
    }
}

/// The hint of an unknown or ambiguous revision (`closest`: the revision nearest to it).
fn revision_hint(revision: &str, closest: Option<&str>) -> String {
    let dataset = revision.split('@').next().unwrap_or(revision);
    if let Some(closest) = closest {
        return format!("did you mean {closest}? `dsv log {dataset}` lists its versions and tags");
    }
    if revision
        .rsplit_once('@')
        .is_some_and(|(_, base)| base.eq_ignore_ascii_case("head"))
    {
        return format!(
            "the head is {dataset}@latest (or {dataset}@HEAD, in capitals); `dsv log {dataset}` lists its versions and tags"
        );
    }
    if let Some((remote, dataset)) = dataset.split_once('/') {
        return format!(
            "`dsv fetch --remote {remote}` lists the datasets and tags {remote} has; then `dsv pull NAME --remote {remote}` (or `dsv checkout {remote}/NAME DIR`). A dataset of this store: `dsv log {dataset}`"
        );
    }
    format!("`dsv log {dataset}` lists its versions and tags")
}

/// The hint of a failed request to a remote, by its class (`action`: what dsv was doing).
fn remote_hint(class: RemoteClass, action: &str) -> &'static str {
    match class {
        // `dsv remote add`'s check (`check_remote`): nothing was added.
        RemoteClass::MissingBucket if action.starts_with(ADD_CHECK_ACTION) => {
            "the bucket (or container) does not exist, and the remote was not added: fix the URL, or create the bucket; `dsv remote add --no-check` adds it anyway"
        }
        RemoteClass::MissingBucket => {
            "the bucket (or container) does not exist: create it, or fix the remote's URL with `dsv remote rm` and `dsv remote add` (`dsv remote add --no-check` adds one whose bucket is made later)"
        }
        RemoteClass::NoCredentials => {
            "no AWS credentials were found. dsv looked in the environment (AWS_ACCESS_KEY_ID with AWS_SECRET_ACCESS_KEY, AWS_WEB_IDENTITY_TOKEN_FILE, AWS_CONTAINER_CREDENTIALS_RELATIVE_URI), in the AWS profile files (the profile AWS_PROFILE names, else default, in ~/.aws/credentials and ~/.aws/config, or AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE), and last at the EC2 instance metadata service, which gave none (the cause above). Set the environment variables or a profile (`aws configure`); a public bucket is read without credentials with --option aws_skip_signature=true"
        }
        RemoteClass::CredentialsRefused => {
            "the remote refused the credentials: check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) or the AWS profile (AWS_PROFILE, ~/.aws/credentials), AZURE_STORAGE_ACCOUNT_KEY, GOOGLE_APPLICATION_CREDENTIALS and their permissions"
        }
        RemoteClass::NotFound | RemoteClass::Rejected | RemoteClass::Failed => {
            "check the URL, the endpoint and credentials (AWS_*, AZURE_*, GOOGLE_* environment variables) and that the bucket exists; a re-run of a push or pull sends only what is still missing"
        }
    }
}

/// The hint of a rebase stopped by conflicts ([`Error::RebaseConflicts`]).
fn rebase_conflicts_hint(onto: &str, one_side_settles: bool) -> String {
    let settle = if one_side_settles {
        format!(
            "choose a side and run it again: `dsv rebase {onto} --theirs` takes {onto}'s version of every such path, `--ours` keeps yours (or per path: --theirs=PATH, --ours=PATH); or"
        )
    } else {
        "a file on one side where the other has entries below it cannot be settled with --ours or --theirs:".into()
    };
    format!(
        "nothing was changed; {settle} check out {onto} into a new directory (`dsv checkout {onto} DIR`), bring your changes there by hand, `dsv commit` there, then `dsv push`"
    )
}

/// The hint under a refused `rm`: what lets go of each holder it names.
fn held_hint(holders: &[Holder]) -> String {
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

/// ENOSPC, by its number or its kind.
fn is_full_disk_io(e: &io::Error) -> bool {
    e.raw_os_error() == Some(28) || e.kind() == io::ErrorKind::StorageFull
}

/// The message of [`Error::NestedStore`].
fn nested_store_message(dir: &Path, store: &Path, workspace: Option<&Path>) -> String {
    match workspace {
        Some(workspace) => format!(
            "will not create a store in {}: it is inside {}, a workspace of the store at {}",
            dir.display(),
            workspace.display(),
            store.display()
        ),
        None => format!(
            "will not create a store in {}: it is inside {}, the tree of the store at {} (dsv commands run there use that store)",
            dir.display(),
            store.parent().unwrap_or(store).display(),
            store.display()
        ),
    }
}

/// The start of [`Error::Remote`]'s action when `dsv remote add` checks a remote before
/// adding it.
pub const ADD_CHECK_ACTION: &str = "check before adding it";

/// Attaches a path (or, where there is none, the operation) to an [`io::Error`], as jj's
/// `IoResultExt::context` does.
pub trait IoResultExt<T> {
    /// Converts the error into [`Error::Io`] naming `path`, a file or directory.
    fn at(self, path: &Path) -> Result<T>;

    /// Converts the error into [`Error::IoOperation`] naming `operation`, for I/O that has
    /// no file to name (worded to follow "I/O error ": "starting a worker thread").
    fn during(self, operation: &'static str) -> Result<T>;
}

impl<T> IoResultExt<T> for io::Result<T> {
    fn at(self, path: &Path) -> Result<T> {
        self.map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })
    }

    fn during(self, operation: &'static str) -> Result<T> {
        self.map_err(|source| Error::IoOperation { operation, source })
    }
}

/// `bytes` in GiB with one decimal, for messages.
fn gibibytes(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
}

#[cfg(test)]
mod kind_tests {
    use super::*;

    /// A catalog failure of `class` (the store crate's classification of SQLite's codes is
    /// tested there).
    fn catalog(class: CatalogClass) -> Error {
        Error::Catalog(CatalogFailure::new(
            class,
            "catalog error",
            "database says no".into(),
        ))
    }

    #[test]
    fn catalog_failures_are_classed_by_their_class() {
        assert_eq!(catalog(CatalogClass::Bug).kind(), ErrorKind::Internal);
        assert_eq!(catalog(CatalogClass::Corrupt).kind(), ErrorKind::Corrupt);
        assert_eq!(catalog(CatalogClass::Environment).kind(), ErrorKind::Io);
        assert_eq!(catalog(CatalogClass::DiskFull).kind(), ErrorKind::Io);
        assert!(catalog(CatalogClass::DiskFull).is_disk_full());
        assert!(!catalog(CatalogClass::Environment).is_disk_full());
        // Shown by its message; the database's own words follow as the cause.
        let error = catalog(CatalogClass::Corrupt);
        assert_eq!(error.to_string(), "catalog error");
        assert_eq!(causes(&error), ["database says no"]);
    }

    #[test]
    fn every_kind_has_its_own_name() {
        let names: Vec<&str> = ErrorKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(
            names,
            [
                "user",
                "conflict",
                "corrupt",
                "io",
                "interrupted",
                "internal"
            ]
        );
        // `ALL` holds every kind once: this match breaks when a kind is added.
        for kind in ErrorKind::ALL {
            let index = match kind {
                ErrorKind::User => 0,
                ErrorKind::Conflict => 1,
                ErrorKind::Corrupt => 2,
                ErrorKind::Io => 3,
                ErrorKind::Interrupted => 4,
                ErrorKind::Internal => 5,
            };
            assert_eq!(ErrorKind::ALL[index], kind);
        }
    }

    fn io(kind: io::ErrorKind) -> Error {
        Error::Io {
            path: "/data/x".into(),
            source: io::Error::new(kind, "refused"),
        }
    }

    fn remote(class: RemoteClass) -> Error {
        Error::Remote {
            remote: "origin".into(),
            action: "list packs/".into(),
            source: RemoteFailure::new(class, "the backend says no".into()),
        }
    }

    #[test]
    fn errors_are_classed() {
        assert_eq!(Error::NoRemote.kind(), ErrorKind::User);
        assert_eq!(
            Error::DatasetNotFound {
                name: "x".into(),
                closest: None
            }
            .kind(),
            ErrorKind::User
        );
        assert_eq!(
            Error::HeadMoved {
                dataset: "d".into()
            }
            .kind(),
            ErrorKind::Conflict
        );
        assert_eq!(Error::corrupt("/p", "bad").kind(), ErrorKind::Corrupt);
        assert_eq!(io(io::ErrorKind::PermissionDenied).kind(), ErrorKind::Io);
        assert_eq!(Error::Interrupted.kind(), ErrorKind::Interrupted);
        assert_eq!(
            Error::Internal { detail: "x".into() }.kind(),
            ErrorKind::Internal
        );
        // A remote's refusal is the user's to fix; its failure is the network's (the remote
        // crate's classification of object_store's errors is tested there).
        for class in [
            RemoteClass::MissingBucket,
            RemoteClass::NoCredentials,
            RemoteClass::CredentialsRefused,
            RemoteClass::NotFound,
            RemoteClass::Rejected,
        ] {
            assert_eq!(remote(class).kind(), ErrorKind::User, "{class:?}");
        }
        assert_eq!(remote(RemoteClass::Failed).kind(), ErrorKind::Io);
        assert_eq!(
            causes(&remote(RemoteClass::Failed)),
            ["the backend says no"]
        );
        let hint = &remote(RemoteClass::NoCredentials).hints()[0];
        assert!(hint.starts_with("no AWS credentials were found"), "{hint}");
        assert!(!hint.contains("refused"), "{hint}");
        assert!(
            remote(RemoteClass::CredentialsRefused).hints()[0].starts_with("the remote refused")
        );
    }

    #[test]
    fn an_xml_error_body_is_shown_as_its_code_and_message() {
        let s3 = "Error performing GET http://h/b?list-type=2 in 2ms - Server returned non-2xx status code: 404 Not Found: <?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message><BucketName>dsv-tset</BucketName><RequestId>ABC</RequestId></Error>";
        assert_eq!(
            without_error_xml(s3),
            "Error performing GET http://h/b?list-type=2 in 2ms - Server returned non-2xx status code: 404 Not Found: NoSuchBucket: the bucket dsv-tset does not exist"
        );
        let azure = "Server returned non-2xx status code: 404 Not Found: <?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>ContainerNotFound</Code><Message>The specified container does not exist.\nRequestId:1\nTime:2</Message></Error>";
        assert_eq!(
            without_error_xml(azure),
            "Server returned non-2xx status code: 404 Not Found: ContainerNotFound: The specified container does not exist"
        );
        for plain in [
            "connection refused",
            "a <b> c",
            "<?xml version=\"1.0\"?><x/>",
        ] {
            assert_eq!(without_error_xml(plain), plain);
        }
    }

    #[test]
    fn hints_follow_the_error() {
        assert_eq!(
            io(io::ErrorKind::StorageFull).hints(),
            ["free some disk space and run the command again; nothing was recorded"]
        );
        assert_eq!(
            catalog(CatalogClass::DiskFull).hints(),
            ["free some disk space and run the command again; nothing was recorded"]
        );
        assert!(io(io::ErrorKind::InvalidFilename).hints()[0].starts_with("the path is longer"));
        assert!(io(io::ErrorKind::PermissionDenied).hints().is_empty());
        assert_eq!(
            Error::NoStore { start: "/w".into() }.hints(),
            ["run `dsv init` to create a store here, or pass --store PATH / set DSV_STORE"]
        );
        assert!(
            Error::StoreExists {
                path: "/w/.dsv".into()
            }
            .hints()
            .is_empty()
        );
        // Damage in what a remote sent is the remote's, whichever way it is named; damage
        // here is the store's.
        for remote in [
            "remote origin",
            "origin:packs/ab.pack",
            "origin:refs/heads/mnist",
        ] {
            assert!(
                Error::corrupt(remote, "x").hints()[0].starts_with("the remote's copy"),
                "{remote}"
            );
        }
        assert!(
            Error::corrupt("/w/.dsv/packs/ab.pack", "x").hints()[0].starts_with("run `dsv verify`")
        );
        // Internal errors, also SQLite's that are bugs, say so; a damaged catalog does not.
        assert_eq!(Error::Internal { detail: "x".into() }.hints(), [BUG_HINT]);
        assert_eq!(catalog(CatalogClass::Bug).hints(), [BUG_HINT]);
        assert!(catalog(CatalogClass::Corrupt).hints().is_empty());
        assert_eq!(
            Error::DatasetNotFound {
                name: "mnsit".into(),
                closest: Some("mnist".into())
            }
            .hints(),
            ["did you mean mnist? `dsv ls` lists the datasets"]
        );
        assert_eq!(
            Error::RevisionNotFound {
                revision: "mnist@head".into(),
                closest: None,
            }
            .hints(),
            [
                "the head is mnist@latest (or mnist@HEAD, in capitals); `dsv log mnist` lists its versions and tags"
            ]
        );
        let held = Error::VersionHeld {
            version: "abc".into(),
            holders: vec![
                Holder::Pin { reason: "r".into() },
                Holder::Workspace { path: "/a".into() },
                Holder::Workspace { path: "/b".into() },
            ],
        };
        assert_eq!(
            held.to_string(),
            "cannot remove version abc: it is pinned (r); the workspaces /a, /b hold it"
        );
        assert_eq!(
            held.hints(),
            [
                "`dsv unpin REV` lifts the pin (`dsv pins` lists them); `dsv workspace forget DIR` lets a directory go (its files are left as they are; `dsv workspace ls` lists them)"
            ]
        );
    }

    #[test]
    fn a_rebase_stopped_by_conflicts_says_how_to_settle_them() {
        let stopped = |one_side_settles| Error::RebaseConflicts {
            dataset: "m".into(),
            onto: "origin/m".into(),
            conflicts: 1,
            one_side_settles,
        };
        assert_eq!(
            stopped(true).to_string(),
            "cannot rebase m onto origin/m: 1 path(s) changed on both sides"
        );
        assert_eq!(stopped(true).kind(), ErrorKind::Conflict);
        assert_eq!(
            stopped(true).hints(),
            [
                "nothing was changed; choose a side and run it again: `dsv rebase origin/m --theirs` takes origin/m's version of every such path, `--ours` keeps yours (or per path: --theirs=PATH, --ours=PATH); or check out origin/m into a new directory (`dsv checkout origin/m DIR`), bring your changes there by hand, `dsv commit` there, then `dsv push`"
            ]
        );
        assert!(
            stopped(false).hints()[0].starts_with(
                "nothing was changed; a file on one side where the other has entries below it cannot be settled with --ours or --theirs: check out origin/m"
            )
        );
    }

    /// The table gives each error its Python class: its own, or its kind's.
    #[test]
    fn python_classes_come_from_the_table() {
        assert_eq!(
            Error::NoStore { start: "/w".into() }.python_class(),
            "NoStore"
        );
        assert_eq!(
            Error::PathsNotFound {
                revision: "d".into(),
                paths: Vec::new()
            }
            .python_class(),
            "PathNotFound"
        );
        assert_eq!(Error::NoRemote.python_class(), "Error");
        assert_eq!(
            Error::Internal { detail: "x".into() }.python_class(),
            "InternalError"
        );
        assert_eq!(catalog(CatalogClass::Environment).python_class(), "IoError");
        assert_eq!(remote(RemoteClass::Failed).python_class(), "RemoteError");
        let failed = Error::RemotesFailed(Box::new(RemotesFailed {
            first: Error::NoRemote,
            tried: Vec::new(),
        }));
        assert_eq!(failed.python_class(), "Error");
    }

    #[test]
    fn io_errors_name_a_path_an_operation_or_a_source() {
        let path = io(io::ErrorKind::PermissionDenied);
        assert_eq!(path.to_string(), "I/O error on /data/x");
        let thread: Result<()> = Err(io::Error::other("EAGAIN")).during("starting a worker thread");
        let thread = thread.unwrap_err();
        assert_eq!(thread.to_string(), "I/O error starting a worker thread");
        assert_eq!(thread.kind(), ErrorKind::Io);
        let full: Result<()> =
            Err(io::Error::from(io::ErrorKind::StorageFull)).during("writing the output");
        assert!(full.unwrap_err().is_disk_full());
        // A source's URL is shown without its credentials.
        let source = Error::SourceIo {
            url: "https://user:secret@example.com/data.tar".into(),
            source: io::Error::new(io::ErrorKind::TimedOut, "the source stalled"),
        };
        assert_eq!(source.kind(), ErrorKind::Io);
        assert!(!source.to_string().contains("secret"), "{source}");
        assert!(source.to_string().starts_with("I/O error on https://"));
        assert!(source.hints().is_empty());
    }

    #[test]
    fn causes_leave_out_repeats() {
        #[derive(Debug)]
        struct Layer(&'static str, Option<Box<Layer>>);
        impl std::fmt::Display for Layer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.0)
            }
        }
        impl std::error::Error for Layer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                self.1.as_deref().map(|l| l as _)
            }
        }
        let chain = Layer(
            "top",
            Some(Box::new(Layer(
                "request failed: connection refused",
                Some(Box::new(Layer(
                    "connection refused",
                    Some(Box::new(Layer("os error 111", None))),
                ))),
            ))),
        );
        assert_eq!(
            causes(&chain),
            ["request failed: connection refused", "os error 111"]
        );
        assert!(causes(&Error::NoRemote).is_empty());
        assert_eq!(causes(&io(io::ErrorKind::Other)), ["refused"]);
    }
}
