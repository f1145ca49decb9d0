//! `dsv mount`: one version as a read-only FUSE file system (SageMaker's FastFile mode), a
//! front end of the read engine ([`dsv::read`]) as the CLI's `cat` and `export` are.
//!
//! ```text
//! kernel (FUSE) ─► fuser session, several threads ─► MountFs
//!   lookup/getattr/readdir/readlink: the inode table, built once at mount from the
//!     version's listing (no data read), inode = index + 1 (1 = the root)
//!   open: answers at once, with FOPEN_PASSTHROUGH and the file's backing file when it has
//!     a complete one (see below), else with FOPEN_KEEP_CACHE (the bytes never change, so
//!     the page cache holds them across opens); the engine's VersionHandle::open (which
//!     loads the file's chunk list, and fetches a remote-only file's chunks) waits for the
//!     fh's first read, so a file read again from the page cache costs the engine nothing
//!   read: FileHandle::read_at through the engine's shared frame cache, up to 1 MiB a request;
//!     the bytes served are also written into the file's backing file
//!   anything that writes: EROFS
//! ```
//!
//! Passthrough (Linux 6.9+, `CAP_SYS_ADMIN`): a file read whole once through the mount has a
//! plain local copy (a backing file, [`backing`]) that the kernel then reads directly on
//! the next open: page-cache speed, no request to dsv. Where the kernel does not grant it
//! (older kernel, not root) or refuses a backing file, reads are served by dsv as before.
//!
//! The mount holds a lease on its version for its whole life (a `dsv_store::lease::Lease`), as
//! `export` does: a `gc` meanwhile keeps the version and does not wait for the mount. It ends when the session ends: `fusermount3 -u` from
//! outside, or the cancellation of the operation's [`dsv::interrupt::CancelToken`] (the CLI cancels
//! it on Ctrl-C and SIGTERM), which unmounts.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod backing;

/// The target of the mount's log events: `dsv::mount`, as when the mount was a module of the
/// library, so the documented `DSV_LOG=dsv::mount=trace` (and `dsv=...`) select them.
const TARGET: &str = "dsv::mount";

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, BsdFileFlags, CopyFileRangeFlags, Errno, FileAttr, FileType, Filesystem,
    FopenFlags, Generation, INodeNo, InitFlags, KernelConfig, LockOwner, MountOption, OpenAccMode,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use backing::{Backings, OpenMode};

use dsv::error::{Error, Result};
use dsv::id::ObjectId;
use dsv::read::{FileHandle, ReadEngine, Selection, VersionHandle};
use dsv::tree::FlatKind;

/// The version never changes: the kernel may keep attributes and names this long.
const TTL: Duration = Duration::from_secs(3600);
/// The block size reported to `stat` (what `cp` and friends size their reads by).
const BLOCK_SIZE: u32 = 128 * 1024;
/// The kernel's read-ahead window on the mount's files, in KiB: the largest read request
/// FUSE sends by default (`/proc/sys/fs/fuse/max_pages_limit`, 256 pages), so a sequential
/// reader's misses reach dsv as 1 MiB requests, not the 128 KiB of the kernel's default
/// window (8x fewer round trips through the kernel).
const READ_AHEAD_KB: u32 = 1024;

/// Settings of [`mount`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MountOptions {
    /// Threads serving requests (default 4; at least 1).
    pub threads: usize,
    /// Whether a file read whole once is then served by FUSE passthrough from a local copy
    /// (default true; where the kernel does not grant it, reads are served by dsv anyway).
    /// False: every read is served by dsv, as on kernels without passthrough.
    pub passthrough: bool,
    /// Bytes the passthrough copies may take on the store's file system, in its `tmp/`
    /// (`None`: a tenth of the free space, at most 64 GiB; never more than half the free
    /// space, [`backing::budget`]; `Some(0)`: no copies, as `passthrough: false`). Least
    /// recently opened copies no open uses are deleted to make room; a file larger than
    /// this is never copied.
    pub passthrough_cache_bytes: Option<u64>,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            threads: 4,
            passthrough: true,
            passthrough_cache_bytes: None,
        }
    }
}

/// What is mounted.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MountInfo {
    /// The version mounted.
    pub version: ObjectId,
    /// The revision as given.
    pub revision: String,
    /// Where (canonical).
    pub mountpoint: PathBuf,
    /// Regular files visible.
    pub files: u64,
    /// Directories visible (the root included).
    pub dirs: u64,
    /// Bytes of the visible files.
    pub bytes: u64,
    /// Whether passthrough is on: the kernel granted it, so a file read whole once is then
    /// read by the kernel from a local copy (a refusal later, logged, turns it off).
    pub passthrough: bool,
    /// The byte budget of the passthrough copies (0 when passthrough is off).
    pub passthrough_cache_bytes: u64,
}

/// Mounts version `revision` (the files `selection` picks, with the directories on their
/// paths; the version's symlinks only when everything is selected) read-only at
/// `mountpoint`, calls `mounted` once it is serving, and serves in the foreground until it
/// is unmounted from outside (`fusermount3 -u`) or the current [`dsv::interrupt::CancelToken`] is cancelled
/// (then it unmounts itself). Mounting reads no file data: it takes well under a second
/// whatever the version's size. With [`MountOptions::passthrough`] and a kernel that grants
/// it ([`MountInfo::passthrough`]), files read whole are copied into the store's
/// `tmp/mount-PID-N/` (see [`backing`]), which is removed when this returns; where the copies
/// cannot be made or the kernel refuses them, reads are served by dsv, never an error.
///
/// # Errors
/// [`Error::BadMountpoint`] for a mount point that is missing, not a directory, a dead
/// mount or already a FUSE mount; [`Error::FuseUnavailable`] when there is no `/dev/fuse`,
/// no `fusermount3` (for a user other than root) or the mount is refused; as
/// [`ReadEngine::version`] and [`VersionHandle::select`]; [`Error::Io`] when unmounting fails.
pub fn mount(
    engine: &ReadEngine,
    revision: &str,
    selection: &Selection,
    mountpoint: &Path,
    options: &MountOptions,
    mounted: &mut dyn FnMut(&MountInfo),
) -> Result<MountInfo> {
    let canonical = check_mountpoint(mountpoint)?;
    check_fuse(mountpoint)?;
    let version = engine.version(revision)?;
    let mut fs = MountFs::new(version, selection)?;
    let backings = backings(engine, options);
    fs.backings = backings.clone();
    let (files, dirs, bytes) = (fs.files, fs.dirs, fs.bytes);
    let version_id = fs.version.id();
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        MountOption::RO,
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::DefaultPermissions,
        MountOption::FSName(format!("dsv:{revision}")),
        MountOption::Subtype("dsv".into()),
    ];
    config.n_threads = Some(options.threads.max(1));
    // Removes the backing files however this function returns.
    let _cleanup = RemoveBackings(backings.clone());
    // The kernel's INIT handshake (which decides passthrough) is done when this returns.
    let mut session =
        fuser::Session::new(fs, &canonical, &config).map_err(|e| Error::FuseUnavailable {
            mountpoint: mountpoint.to_path_buf(),
            reason: format!("the mount was refused: {e}"),
        })?;
    let passthrough = backings.as_ref().is_some_and(|b| b.enabled());
    let info = MountInfo {
        version: version_id,
        revision: revision.to_string(),
        mountpoint: canonical.clone(),
        files,
        dirs,
        bytes,
        passthrough,
        passthrough_cache_bytes: match &backings {
            Some(b) if passthrough => b.budget(),
            _ => 0,
        },
    };
    if let Some(b) = backings.as_ref().filter(|_| passthrough) {
        tracing::info!(target: TARGET, dir = %b.dir().display(), budget = b.budget(), "mount: passthrough on");
    }
    let mut unmounter = session.unmount_callable();
    let serving = std::thread::Builder::new()
        .name("dsv-mount".into())
        .spawn(move || session.run())
        .map_err(|source| Error::Io {
            path: canonical.clone(),
            source,
        })?;
    widen_read_ahead(&canonical);
    mounted(&info);
    loop {
        if serving.is_finished() {
            // Unmounted from outside: the session ended by itself.
            return match serving.join() {
                Ok(Ok(())) => Ok(info),
                Ok(Err(source)) => Err(Error::Io {
                    path: canonical,
                    source,
                }),
                Err(_) => Err(Error::Internal {
                    detail: "the mount's serving thread panicked".into(),
                }),
            };
        }
        if dsv::interrupt::requested() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    match unmounter.unmount() {
        Ok(()) => {
            // The session sees the unmount and ends.
            let _ = serving.join();
            Ok(info)
        }
        Err(error) => {
            // Busy (a shell's working directory inside, an open file): detach it lazily; it
            // goes away when its last user does, and this process need not wait for that.
            tracing::warn!(target: TARGET, %error, "unmounting {} failed; detaching it lazily", canonical.display());
            if lazy_unmount(&canonical) {
                Ok(info)
            } else {
                Err(Error::Io {
                    path: canonical,
                    source: error,
                })
            }
        }
    }
}

/// The backing files of a mount with `options`: `None` when passthrough is off by the
/// options, or its directory cannot be made in the store's `tmp/` (a read-only store: logged).
fn backings(engine: &ReadEngine, options: &MountOptions) -> Option<Arc<Backings>> {
    if !options.passthrough || options.passthrough_cache_bytes == Some(0) {
        tracing::info!(target: TARGET, "mount: passthrough off by the options; every read is served by dsv");
        return None;
    }
    let temp_dir = engine.packs_dir().parent()?.join("tmp");
    let budget = backing::budget(&temp_dir, options.passthrough_cache_bytes);
    if budget < backing::MIN_BACKED_BYTES {
        tracing::info!(target: TARGET, budget, "mount: passthrough off: no room for backing files; every read is served by dsv");
        return None;
    }
    match backing::make_dir(&temp_dir) {
        Ok(dir) => Some(Arc::new(Backings::new(dir, budget, options.threads))),
        Err(error) => {
            tracing::info!(target: TARGET, %error, dir = %temp_dir.display(),
                "mount: passthrough off: cannot make a directory for backing files; every read is served by dsv");
            None
        }
    }
}

/// Removes a mount's backing directory when dropped (the mount ended, or failed to start).
/// Files the kernel still has open (a lazily detached mount) stay readable until closed.
struct RemoveBackings(Option<Arc<Backings>>);

impl Drop for RemoveBackings {
    fn drop(&mut self) {
        let Some(backings) = &self.0 else {
            return;
        };
        tracing::info!(target: TARGET, opens = backings.passthrough_opens(), "mount: opens served by passthrough");
        if let Err(error) = std::fs::remove_dir_all(backings.dir()) {
            tracing::warn!(target: TARGET, %error, dir = %backings.dir().display(), "mount: cannot remove the backing files");
        }
    }
}

/// Sets the mount's read-ahead window to [`READ_AHEAD_KB`] (its backing device's
/// `read_ahead_kb` in sysfs; root only, and only after the kernel's INIT handshake, whose
/// reply caps the window at the kernel's 128 KiB default: the `stat` of the mount point
/// waits for it). Elsewhere the kernel's default stays, and reads are served all the same.
fn widen_read_ahead(mountpoint: &Path) {
    use std::os::unix::fs::MetadataExt;
    let device = match std::fs::metadata(mountpoint) {
        Ok(metadata) => metadata.dev(),
        Err(error) => {
            tracing::debug!(target: TARGET, %error, "mount: cannot stat the mount point; read-ahead left as it is");
            return;
        }
    };
    let setting = format!(
        "/sys/class/bdi/{}:{}/read_ahead_kb",
        nix::sys::stat::major(device),
        nix::sys::stat::minor(device)
    );
    match std::fs::write(&setting, format!("{READ_AHEAD_KB}\n")) {
        Ok(()) => tracing::debug!(target: TARGET, setting, "mount: read-ahead {READ_AHEAD_KB} KiB"),
        Err(error) => {
            tracing::debug!(target: TARGET, setting, %error, "mount: read-ahead left at the kernel's default");
        }
    }
}

/// `fusermount3 -u -z` (or `umount -l`): a lazy unmount.
fn lazy_unmount(mountpoint: &Path) -> bool {
    let run = |program: &str, args: &[&str]| {
        std::process::Command::new(program)
            .args(args)
            .arg(mountpoint)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    run("fusermount3", &["-u", "-z", "-q"])
        || run("fusermount", &["-u", "-z", "-q"])
        || run("umount", &["-l"])
}

/// The mount point's canonical path, once it is known to be an existing, empty directory
/// that is not already a FUSE mount.
fn check_mountpoint(mountpoint: &Path) -> Result<PathBuf> {
    let bad = |reason: &str| Error::BadMountpoint {
        mountpoint: mountpoint.to_path_buf(),
        reason: reason.to_string(),
    };
    let metadata = match std::fs::metadata(mountpoint) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(bad("it does not exist"));
        }
        // ENOTCONN: a FUSE mount whose server is gone (killed).
        Err(e) if e.raw_os_error() == Some(107) => {
            return Err(bad(
                "it is a dead FUSE mount (its server has gone): release it with `fusermount3 -u`",
            ));
        }
        Err(source) => {
            return Err(Error::Io {
                path: mountpoint.to_path_buf(),
                source,
            });
        }
    };
    if !metadata.is_dir() {
        return Err(bad("it is not a directory"));
    }
    let canonical = mountpoint.canonicalize().map_err(|source| Error::Io {
        path: mountpoint.to_path_buf(),
        source,
    })?;
    if let Some(fstype) = mounted_fuse(&canonical) {
        return Err(bad(&format!(
            "it is busy: a FUSE file system ({fstype}) is already mounted there; `fusermount3 -u` unmounts it"
        )));
    }
    // A mount hides what is under it: only an empty directory is mounted on.
    let mut entries = std::fs::read_dir(&canonical).map_err(|source| Error::Io {
        path: mountpoint.to_path_buf(),
        source,
    })?;
    if let Some(entry) = entries.next() {
        entry.map_err(|source| Error::Io {
            path: mountpoint.to_path_buf(),
            source,
        })?;
        return Err(bad(
            "it is not empty (a mount would hide its files): mount on an empty directory",
        ));
    }
    Ok(canonical)
}

/// The type of the FUSE file system mounted at `path`, if one is (from
/// `/proc/self/mountinfo`; `None` where that cannot be read).
fn mounted_fuse(path: &Path) -> Option<String> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    table.lines().find_map(|line| {
        // "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER"
        let fields: Vec<&str> = line.split(' ').collect();
        let point = unescape_mountinfo(fields.get(4)?);
        let dash = fields.iter().position(|f| *f == "-")?;
        let fstype = fields.get(dash + 1)?;
        (Path::new(OsStr::from_bytes(&point)) == path
            && (*fstype == "fuse" || fstype.starts_with("fuse.")))
        .then(|| fstype.to_string())
    })
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape_mountinfo(field: &str) -> Vec<u8> {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && let Some(code) = bytes.get(i + 1..i + 4)
            && let Ok(text) = std::str::from_utf8(code)
            && let Ok(value) = u8::from_str_radix(text, 8)
        {
            out.push(value);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

/// Fails early, with what to install, when FUSE cannot work here.
fn check_fuse(mountpoint: &Path) -> Result<()> {
    let unavailable = |reason: &str| Error::FuseUnavailable {
        mountpoint: mountpoint.to_path_buf(),
        reason: reason.to_string(),
    };
    if !Path::new("/dev/fuse").exists() {
        return Err(unavailable(
            "/dev/fuse does not exist (the fuse kernel module is not loaded, or a container was started without it)",
        ));
    }
    // Root mounts directly; anyone else goes through the setuid helper.
    if !nix::unistd::geteuid().is_root() && find_in_path(&["fusermount3", "fusermount"]).is_none() {
        return Err(unavailable("fusermount3 is not installed"));
    }
    Ok(())
}

/// The first of `names` found in `$PATH`.
fn find_in_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// One inode.
struct Node {
    parent: u64,
    name: String,
    kind: NodeKind,
    size: u64,
}

enum NodeKind {
    /// Children's inodes, sorted by name.
    Dir(Vec<u64>),
    File {
        path: String,
        executable: bool,
    },
    Symlink(String),
}

/// The file system: the version's inode table and the open files.
struct MountFs {
    version: VersionHandle,
    /// Inode `i` is `nodes[i - 1]`.
    nodes: Vec<Node>,
    open: RwLock<HashMap<u64, Arc<OpenFile>>>,
    next_fh: AtomicU64,
    /// The passthrough copies (`None`: every read is served by dsv).
    backings: Option<Arc<Backings>>,
    uid: u32,
    gid: u32,
    time: SystemTime,
    files: u64,
    dirs: u64,
    bytes: u64,
}

impl MountFs {
    fn new(version: VersionHandle, selection: &Selection) -> Result<MountFs> {
        let everything = selection.is_everything();
        let (chosen, on_paths) = if everything {
            (Default::default(), Default::default())
        } else {
            let files = version.select(selection)?;
            let mut dirs = std::collections::HashSet::new();
            for file in &files {
                let mut path = file.path.as_str();
                while let Some((parent, _)) = path.rsplit_once('/') {
                    if !dirs.insert(parent.to_string()) {
                        break;
                    }
                    path = parent;
                }
            }
            let chosen: std::collections::HashSet<String> =
                files.iter().map(|e| e.path.clone()).collect();
            (chosen, dirs)
        };
        let mut nodes = vec![Node {
            parent: 1,
            name: String::new(),
            kind: NodeKind::Dir(Vec::new()),
            size: 0,
        }];
        let mut dir_inodes: HashMap<String, u64> = HashMap::from([(String::new(), 1)]);
        let (mut files, mut dirs, mut bytes) = (0u64, 1u64, 0u64);
        for entry in version.entries()? {
            let (parent_path, name) = entry.path.rsplit_once('/').unwrap_or(("", &entry.path));
            let kind = match &entry.kind {
                FlatKind::Dir if everything || on_paths.contains(&entry.path) => {
                    NodeKind::Dir(Vec::new())
                }
                FlatKind::File { executable } if everything || chosen.contains(&entry.path) => {
                    NodeKind::File {
                        path: entry.path.clone(),
                        executable: *executable,
                    }
                }
                FlatKind::Symlink { target } if everything => NodeKind::Symlink(target.clone()),
                _ => continue,
            };
            let Some(&parent) = dir_inodes.get(parent_path) else {
                // Not reachable from a listing in depth-first order; skipped, never a panic.
                continue;
            };
            let inode = nodes.len() as u64 + 1;
            let size = match &kind {
                NodeKind::Dir(_) => {
                    dirs += 1;
                    dir_inodes.insert(entry.path.clone(), inode);
                    0
                }
                NodeKind::File { .. } => {
                    files += 1;
                    bytes += entry.size;
                    entry.size
                }
                NodeKind::Symlink(target) => target.len() as u64,
            };
            if let Some(Node {
                kind: NodeKind::Dir(children),
                ..
            }) = nodes.get_mut(parent as usize - 1)
            {
                children.push(inode);
            }
            nodes.push(Node {
                parent,
                name: name.to_string(),
                kind,
                size,
            });
        }
        // Sorted by name bytes, for lookup's binary search.
        let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
        for node in &mut nodes {
            if let NodeKind::Dir(children) = &mut node.kind {
                children.sort_by(|a, b| names[*a as usize - 1].cmp(&names[*b as usize - 1]));
            }
        }
        let time = UNIX_EPOCH + Duration::from_secs(version.version().time.max(0) as u64);
        Ok(MountFs {
            version,
            nodes,
            open: RwLock::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            backings: None,
            uid: nix::unistd::getuid().as_raw(),
            gid: nix::unistd::getgid().as_raw(),
            time,
            files,
            dirs,
            bytes,
        })
    }

    fn node(&self, ino: INodeNo) -> Option<&Node> {
        let index = usize::try_from(ino.0).ok()?.checked_sub(1)?;
        self.nodes.get(index)
    }

    fn attr(&self, ino: u64, node: &Node) -> FileAttr {
        let (kind, perm, nlink) = match &node.kind {
            NodeKind::Dir(children) => {
                let subdirs = children
                    .iter()
                    .filter(|c| matches!(self.nodes[**c as usize - 1].kind, NodeKind::Dir(_)))
                    .count();
                (FileType::Directory, 0o555, 2 + subdirs as u32)
            }
            NodeKind::File { executable, .. } => (
                FileType::RegularFile,
                if *executable { 0o555 } else { 0o444 },
                1,
            ),
            NodeKind::Symlink(_) => (FileType::Symlink, 0o777, 1),
        };
        FileAttr {
            ino: INodeNo(ino),
            size: node.size,
            blocks: node.size.div_ceil(512),
            atime: self.time,
            mtime: self.time,
            ctime: self.time,
            crtime: self.time,
            kind,
            perm,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: BLOCK_SIZE,
            flags: 0,
        }
    }

    fn open_file(&self, fh: u64) -> Option<Arc<OpenFile>> {
        self.open
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&fh)
            .cloned()
    }
}

/// A file opened through the mount. The engine's handle is made by the first read of this
/// fh, not by `open`: a file the page cache already holds (a second epoch, another reader
/// of the same file) is read without a request to dsv, and then costs the engine nothing.
struct OpenFile {
    /// The version's path of the file.
    path: String,
    /// How this open is served (counted per inode by [`Backings`] until released).
    mode: OpenMode,
    /// Whether it was closed once (`FLUSH`; a duplicate may still hold it open).
    flushed: std::sync::atomic::AtomicBool,
    /// The engine's handle, once a read has needed it. A failed open leaves it empty, so the
    /// next read tries again (a remote that was away may be back).
    handle: Mutex<Option<Arc<FileHandle>>>,
}

impl OpenFile {
    /// The engine's handle, opened now if no read has opened it yet (one open per fh: the
    /// fh's other reads wait for it).
    fn handle(&self, version: &VersionHandle) -> Result<Arc<FileHandle>> {
        let mut slot = self.handle.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(handle) = &*slot {
            return Ok(handle.clone());
        }
        let handle = Arc::new(version.open(&self.path)?);
        *slot = Some(handle.clone());
        Ok(handle)
    }
}

thread_local! {
    /// Each serving thread's buffer for the bytes of one read reply (up to the largest
    /// request the kernel sends, 1 MiB by default): reused, not allocated per request.
    static READ_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn file_type(kind: &NodeKind) -> FileType {
    match kind {
        NodeKind::Dir(_) => FileType::Directory,
        NodeKind::File { .. } => FileType::RegularFile,
        NodeKind::Symlink(_) => FileType::Symlink,
    }
}

impl Filesystem for MountFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let Some(backings) = &self.backings else {
            return Ok(());
        };
        // Backing files may be on a stacked file system themselves (overlayfs in a
        // container): depth 2, the kernel's most.
        let granted = config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
            && config.set_max_stack_depth(2).is_ok();
        if granted {
            backings.enable();
        } else {
            tracing::info!(target: TARGET, "mount: this kernel has no FUSE passthrough (Linux 6.9+); every read is served by dsv");
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Some(Node {
            kind: NodeKind::Dir(children),
            ..
        }) = self.node(parent)
        else {
            return reply.error(Errno::ENOTDIR);
        };
        let name = name.as_bytes();
        match children.binary_search_by(|c| self.nodes[*c as usize - 1].name.as_bytes().cmp(name)) {
            Ok(i) => {
                let ino = children[i];
                reply.entry(
                    &TTL,
                    &self.attr(ino, &self.nodes[ino as usize - 1]),
                    Generation(0),
                );
            }
            Err(_) => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: Option<fuser::FileHandle>,
        reply: ReplyAttr,
    ) {
        match self.node(ino) {
            Some(node) => reply.attr(&TTL, &self.attr(ino.0, node)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.node(ino) {
            Some(Node {
                kind: NodeKind::Symlink(target),
                ..
            }) => reply.data(target.as_bytes()),
            Some(_) => reply.error(Errno::EINVAL),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.acc_mode() != OpenAccMode::O_RDONLY || flags.0 & libc_o_trunc() != 0 {
            return reply.error(Errno::EROFS);
        }
        let path = match self.node(ino) {
            Some(Node {
                kind: NodeKind::File { path, .. },
                ..
            }) => path,
            Some(Node {
                kind: NodeKind::Dir(_),
                ..
            }) => return reply.error(Errno::EISDIR),
            Some(_) => return reply.error(Errno::EINVAL),
            None => return reply.error(Errno::ENOENT),
        };
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let (mode, backing_id) = match &self.backings {
            Some(backings) => backings.open(ino.0, &reply),
            None => (OpenMode::Cached, None),
        };
        self.open.write().unwrap_or_else(|e| e.into_inner()).insert(
            fh,
            Arc::new(OpenFile {
                path: path.clone(),
                mode,
                flushed: std::sync::atomic::AtomicBool::new(false),
                handle: Mutex::new(None),
            }),
        );
        match backing_id {
            // The kernel reads the backing file; the FUSE file's pages (from reads served
            // before) are not kept.
            Some(id) => reply.opened_passthrough(fuser::FileHandle(fh), FopenFlags::empty(), &id),
            // The bytes never change: the page cache keeps them across opens (no
            // invalidation at open), so a second read of a file is the kernel's alone.
            None => reply.opened(fuser::FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: fuser::FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let Some(file) = self.open_file(fh.0) else {
            return reply.error(Errno::EBADF);
        };
        tracing::trace!(target: TARGET, path = %file.path, offset, size, "mount: read");
        let handle = match file.handle(&self.version) {
            Ok(handle) => handle,
            Err(error) => {
                tracing::error!(target: TARGET, path = %file.path, error = %chain(&error), "mount: cannot open");
                return reply.error(Errno::EIO);
            }
        };
        let want = (size as u64).min(handle.size().saturating_sub(offset)) as usize;
        READ_BUFFER.with_borrow_mut(|buffer| {
            if buffer.len() < want {
                buffer.resize(want, 0);
            }
            match handle.read_at(offset, &mut buffer[..want]) {
                Ok(n) => {
                    // Verified bytes: copied for passthrough before the reply, so that once
                    // a reader has read the whole file, its next open is passthrough (a
                    // write into the page cache, well under a millisecond a request).
                    if let Some(backings) = &self.backings {
                        let id = handle.entry().id;
                        backings.record(ino.0, &id, handle.size(), offset, &buffer[..n]);
                    }
                    reply.data(&buffer[..n]);
                }
                Err(error) => {
                    tracing::error!(target: TARGET, path = %file.path,
                        offset,
                        error = %chain(&error),
                        "mount: read failed"
                    );
                    reply.error(Errno::EIO);
                }
            }
        });
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: fuser::FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let file = self
            .open
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&fh.0);
        if let (Some(file), Some(backings)) = (file, &self.backings) {
            backings.release(ino.0, &file.mode, file.flushed.load(Ordering::Acquire));
        }
        reply.ok();
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: fuser::FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // A close: counted once per open, so that a reopen may wait for its RELEASE.
        if let (Some(backings), Some(file)) = (&self.backings, self.open_file(fh.0))
            && !file.flushed.swap(true, Ordering::AcqRel)
        {
            backings.flushed(ino.0, &file.mode);
        }
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.node(ino) {
            Some(Node {
                kind: NodeKind::Dir(_),
                ..
            }) => reply.opened(fuser::FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE),
            Some(_) => reply.error(Errno::ENOTDIR),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: fuser::FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let Some(
            node @ Node {
                kind: NodeKind::Dir(children),
                ..
            },
        ) = self.node(ino)
        else {
            return reply.error(Errno::ENOTDIR);
        };
        let dots = [
            (ino.0, FileType::Directory, ".".as_bytes()),
            (node.parent, FileType::Directory, "..".as_bytes()),
        ];
        let listing = dots.into_iter().chain(children.iter().map(|c| {
            let child = &self.nodes[*c as usize - 1];
            (*c, file_type(&child.kind), child.name.as_bytes())
        }));
        for (i, (inode, kind, name)) in listing.enumerate().skip(offset as usize) {
            // The offset given is the next entry's index.
            if reply.add(INodeNo(inode), i as u64 + 1, kind, OsStr::from_bytes(name)) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let blocks = self.bytes.div_ceil(u64::from(BLOCK_SIZE));
        reply.statfs(
            blocks,
            0,
            0,
            self.nodes.len() as u64,
            0,
            BLOCK_SIZE,
            255,
            BLOCK_SIZE,
        );
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        if self.node(ino).is_none() {
            reply.error(Errno::ENOENT);
        } else if mask.contains(AccessFlags::W_OK) {
            reply.error(Errno::EROFS);
        } else {
            reply.ok();
        }
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        reply.error(Errno::NO_XATTR);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: ReplyXattr) {
        if size == 0 {
            reply.size(0);
        } else {
            reply.data(&[]);
        }
    }

    // Everything that writes: a version is immutable.

    fn setattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        _size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<fuser::FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        reply.error(Errno::EROFS);
    }

    fn mknod(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn mkdir(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn unlink(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn rmdir(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn symlink(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _link_name: &OsStr,
        _target: &Path,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn rename(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _newparent: INodeNo,
        _newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EROFS);
    }

    fn link(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: fuser::FileHandle,
        _offset: u64,
        _data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        reply.error(Errno::EROFS);
    }

    fn create(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        reply.error(Errno::EROFS);
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EROFS);
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: fuser::FileHandle,
        _offset: u64,
        _length: u64,
        _mode: i32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EROFS);
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        _fh_in: fuser::FileHandle,
        _offset_in: u64,
        _ino_out: INodeNo,
        _fh_out: fuser::FileHandle,
        _offset_out: u64,
        _len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        reply.error(Errno::EROFS);
    }
}

/// The error and its causes, for the log.
fn chain(error: &Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// `O_TRUNC` (Linux's value on every architecture dsv builds for).
const fn libc_o_trunc() -> i32 {
    0o1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape_mountinfo(r"/mnt/a\040b"), b"/mnt/a b");
        assert_eq!(unescape_mountinfo(r"/plain"), b"/plain");
        assert_eq!(unescape_mountinfo(r"/odd\04"), b"/odd\\04");
    }

    #[test]
    fn a_missing_mountpoint_and_a_file_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        assert!(matches!(
            check_mountpoint(&missing),
            Err(Error::BadMountpoint { .. })
        ));
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        assert!(matches!(
            check_mountpoint(&file),
            Err(Error::BadMountpoint { .. })
        ));
        // A directory holding something is refused (a mount would hide it); an empty one
        // is a mount point.
        assert!(matches!(
            check_mountpoint(dir.path()),
            Err(Error::BadMountpoint { .. })
        ));
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        assert!(check_mountpoint(&empty).is_ok());
    }
}
