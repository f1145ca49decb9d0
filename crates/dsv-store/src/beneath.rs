//! File operations confined to a directory: every path is resolved by the kernel from a
//! handle to the directory opened once, without following any symlink and without leaving
//! it.
//!
//! A path checked and then used (`lstat` says "a directory", then `create` writes below it)
//! can be steered elsewhere in between: another process replaces a directory by a symlink
//! to `/etc`, and a write meant for the checkout lands outside it. Here no path is checked
//! and then used. Each operation opens the parent directory of its last name with
//! `openat2(2)` and `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`
//! (Linux 5.6 and later), so a symlink anywhere on the way, or a `..` that leaves the
//! directory, fails the call (`ELOOP`, `EXDEV`); the last name itself is never followed
//! (`O_NOFOLLOW`, `AT_SYMLINK_NOFOLLOW`, `unlinkat`, `renameat`). Where `openat2` is
//! missing (`ENOSYS`), each component is opened in turn with `O_NOFOLLOW | O_DIRECTORY`,
//! which gives the same guarantee one name at a time.
//!
//! A directory that is renamed away while a call holds it keeps its identity: writes go
//! into it wherever it now is, never through a name that someone put in its place.
//! (The same design as the `cap-std` crate's, on Linux; see `openat2(2)`.)

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;
use nix::unistd::UnlinkatFlags;

use crate::error::{Error, Result};
use crate::stat::Stat;

/// Set once `openat2` answered `ENOSYS` (a kernel before 5.6): components are then opened
/// one at a time.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// A directory opened once; every operation takes a path relative to it (`/`-separated, no
/// `..`, no leading `/`) and neither follows a symlink nor leaves it.
#[derive(Debug)]
pub struct BeneathDir {
    handle: OwnedFd,
    /// The path it was opened at, for error messages only (never used to reach a file).
    path: PathBuf,
}

/// A parent directory: the root itself, or one opened below it.
enum Parent<'a> {
    Root(BorrowedFd<'a>),
    Opened(OwnedFd),
}

impl AsFd for Parent<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Parent::Root(fd) => *fd,
            Parent::Opened(fd) => fd.as_fd(),
        }
    }
}

impl BeneathDir {
    /// Opens the directory at `path` (its last name is not followed if it is a symlink).
    ///
    /// # Errors
    /// [`Error::Io`] when it cannot be opened or is not a directory.
    pub fn open(path: &Path) -> Result<BeneathDir> {
        let handle = nix::fcntl::open(
            path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| io_error(path.to_path_buf(), errno))?;
        Ok(BeneathDir {
            handle,
            path: path.to_path_buf(),
        })
    }

    /// What the directory's file system has free (`fstatvfs(2)`).
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn file_system(&self) -> Result<nix::sys::statvfs::Statvfs> {
        nix::sys::statvfs::fstatvfs(&self.handle)
            .map_err(|errno| io_error(self.path.clone(), errno))
    }

    /// The path the directory was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The error for an operation on `relative` that failed with `errno`.
    fn error(&self, relative: &Path, errno: Errno) -> Error {
        io_error(self.path.join(relative), errno)
    }

    /// Opens `relative` (a directory below the root, or the root when empty) with `flags`.
    fn open_below(&self, relative: &Path, flags: OFlag) -> nix::Result<OwnedFd> {
        let flags = flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        if relative.as_os_str().is_empty() {
            return nix::fcntl::openat(&self.handle, ".", flags, Mode::empty());
        }
        if !NO_OPENAT2.load(Ordering::Relaxed) {
            let how = OpenHow::new().flags(flags).resolve(
                ResolveFlag::RESOLVE_BENEATH
                    | ResolveFlag::RESOLVE_NO_SYMLINKS
                    | ResolveFlag::RESOLVE_NO_MAGICLINKS,
            );
            // EAGAIN: a rename elsewhere on the system raced the lookup; the kernel asks
            // for a retry.
            for _ in 0..16 {
                match nix::fcntl::openat2(&self.handle, relative, how) {
                    Err(Errno::EAGAIN) => continue,
                    Err(Errno::ENOSYS) => {
                        NO_OPENAT2.store(true, Ordering::Relaxed);
                        break;
                    }
                    other => return other,
                }
            }
            if !NO_OPENAT2.load(Ordering::Relaxed) {
                return Err(Errno::EAGAIN);
            }
        }
        // One component at a time, none followed.
        let mut current: Option<OwnedFd> = None;
        let components: Vec<&OsStr> = relative
            .as_os_str()
            .as_bytes()
            .split(|b| *b == b'/')
            .filter(|c| !c.is_empty() && *c != b".")
            .map(OsStr::from_bytes)
            .collect();
        for (i, component) in components.iter().enumerate() {
            if component.as_bytes() == b".." {
                return Err(Errno::EXDEV);
            }
            let last = i + 1 == components.len();
            let step = if last {
                flags
            } else {
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
            };
            let next = match &current {
                Some(fd) => nix::fcntl::openat(fd, *component, step, Mode::empty())?,
                None => nix::fcntl::openat(&self.handle, *component, step, Mode::empty())?,
            };
            current = Some(next);
        }
        match current {
            Some(fd) => Ok(fd),
            None => nix::fcntl::openat(&self.handle, ".", flags, Mode::empty()),
        }
    }

    /// The parent directory of `relative`, opened, and its last name.
    fn parent<'p>(
        &self,
        relative: &'p Path,
    ) -> std::result::Result<(Parent<'_>, &'p OsStr), Errno> {
        let bytes = relative.as_os_str().as_bytes();
        let (parent, name) = match bytes.iter().rposition(|b| *b == b'/') {
            Some(slash) => (&bytes[..slash], &bytes[slash + 1..]),
            None => (&[][..], bytes),
        };
        if name.is_empty() || name == b"." || name == b".." {
            return Err(Errno::EINVAL);
        }
        let name = OsStr::from_bytes(name);
        if parent.is_empty() {
            return Ok((Parent::Root(self.handle.as_fd()), name));
        }
        let opened = self.open_below(
            Path::new(OsStr::from_bytes(parent)),
            OFlag::O_PATH | OFlag::O_DIRECTORY,
        )?;
        Ok((Parent::Opened(opened), name))
    }

    /// Runs `f` on the parent directory of `relative` and its last name.
    fn at<T>(
        &self,
        relative: &Path,
        f: impl FnOnce(&Parent<'_>, &OsStr) -> nix::Result<T>,
    ) -> Result<T> {
        let (parent, name) = self
            .parent(relative)
            .map_err(|errno| self.error(relative, errno))?;
        f(&parent, name).map_err(|errno| self.error(relative, errno))
    }

    /// Makes the directory `relative` (mode 0777 less the umask).
    ///
    /// # Errors
    /// [`Error::Io`], `EEXIST` when something is there already.
    pub fn create_dir(&self, relative: impl AsRef<Path>) -> Result<()> {
        self.at(relative.as_ref(), |parent, name| {
            nix::sys::stat::mkdirat(parent, name, Mode::from_bits_truncate(0o777))
        })
    }

    /// Creates the regular file `relative`, new, for reading and writing (mode 0666 less the
    /// umask). Nothing that is already at that name is ever opened (`O_EXCL`): not a hard
    /// link to a file elsewhere, a FIFO or a symlink. A name that is taken (a leftover of a
    /// process whose pid this one reuses, or something planted) is unlinked, and the file
    /// created once more, exclusively again.
    ///
    /// # Errors
    /// [`Error::Io`]; `EEXIST` when the name is taken again at once.
    pub fn create_file(&self, relative: impl AsRef<Path>) -> Result<File> {
        self.at(relative.as_ref(), |parent, name| create_new(parent, name))
            .map(File::from)
    }

    /// Opens the existing file `relative`, for writing when `write`, else for reading. The
    /// open never waits (`O_NONBLOCK`: a FIFO put there opens at once, and
    /// [`crate::workspace::hash_open_file`] refuses it).
    ///
    /// # Errors
    /// [`Error::Io`]; `ELOOP` for a symlink.
    pub fn open_file(&self, relative: impl AsRef<Path>, write: bool) -> Result<File> {
        let mode = if write {
            OFlag::O_WRONLY | OFlag::O_NONBLOCK
        } else {
            OFlag::O_RDONLY | OFlag::O_NONBLOCK
        };
        let fd = self.at(relative.as_ref(), |parent, name| {
            nix::fcntl::openat(
                parent,
                name,
                mode | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
        })?;
        Ok(File::from(fd))
    }

    /// Makes the symlink `relative` pointing at `target`; a file or symlink already at that
    /// name is unlinked first (never followed), as [`BeneathDir::create_file`] does.
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn symlink(&self, target: &str, relative: impl AsRef<Path>) -> Result<()> {
        self.at(relative.as_ref(), |parent, name| {
            symlink_new(target, parent, name)
        })
    }

    /// [`BeneathDir::rename`], then the lstat of `to`, resolving a parent directory once when
    /// `from` and `to` share it (a file staged beside its destination): what applying a
    /// checkout does for every file.
    ///
    /// # Errors
    /// [`Error::Io`] naming `to`.
    pub fn rename_then_lstat(
        &self,
        from: impl AsRef<Path>,
        to: impl AsRef<Path>,
    ) -> Result<Option<Stat>> {
        let (from, to) = (from.as_ref(), to.as_ref());
        let (to_parent, to_name) = self.parent(to).map_err(|e| self.error(to, e))?;
        let renamed = match from.file_name() {
            Some(from_name) if from.parent() == to.parent() => {
                nix::fcntl::renameat(&to_parent, from_name, &to_parent, to_name)
            }
            _ => {
                let (from_parent, from_name) =
                    self.parent(from).map_err(|e| self.error(from, e))?;
                nix::fcntl::renameat(&from_parent, from_name, &to_parent, to_name)
            }
        };
        renamed.map_err(|errno| self.error(to, errno))?;
        match nix::sys::stat::fstatat(&to_parent, to_name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(Some(Stat::of_file_stat(&stat))),
            Err(Errno::ENOENT) => Ok(None),
            Err(errno) => Err(self.error(to, errno)),
        }
    }

    /// A run of operations on neighbouring paths (siblings in path order) that resolves each
    /// parent directory once, not once per name: see [`Nearby`].
    pub fn nearby(&self) -> Nearby<'_> {
        Nearby {
            dir: self,
            last: None,
        }
    }

    /// Renames `from` to `to` (both relative to the root), replacing a file or an empty
    /// directory at `to` as `rename(2)` does.
    ///
    /// # Errors
    /// [`Error::Io`] naming `to`.
    pub fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<()> {
        let (from, to) = (from.as_ref(), to.as_ref());
        let (from_parent, from_name) = self.parent(from).map_err(|e| self.error(from, e))?;
        self.at(to, |to_parent, to_name| {
            nix::fcntl::renameat(&from_parent, from_name, to_parent, to_name)
        })
    }

    /// Removes the file or symlink `relative`.
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn remove_file(&self, relative: impl AsRef<Path>) -> Result<()> {
        self.at(relative.as_ref(), |parent, name| {
            nix::unistd::unlinkat(parent, name, UnlinkatFlags::NoRemoveDir)
        })
    }

    /// Removes the empty directory `relative`.
    ///
    /// # Errors
    /// [`Error::Io`], `ENOTEMPTY` when it holds anything.
    pub fn remove_dir(&self, relative: impl AsRef<Path>) -> Result<()> {
        self.at(relative.as_ref(), |parent, name| {
            nix::unistd::unlinkat(parent, name, UnlinkatFlags::RemoveDir)
        })
    }

    /// Removes the directory `relative` and everything below it, following no symlink
    /// (a symlink below it is removed, not what it points at).
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn remove_dir_all(&self, relative: impl AsRef<Path>) -> Result<()> {
        let relative = relative.as_ref();
        let dir = self
            .open_below(relative, OFlag::O_RDONLY | OFlag::O_DIRECTORY)
            .map_err(|errno| self.error(relative, errno))?;
        empty_dir(dir).map_err(|errno| self.error(relative, errno))?;
        self.remove_dir(relative)
    }

    /// The lstat of `relative`, or `None` when nothing is there.
    ///
    /// # Errors
    /// [`Error::Io`] for anything but `ENOENT` (a symlink on the way is `ELOOP`).
    pub fn lstat(&self, relative: impl AsRef<Path>) -> Result<Option<Stat>> {
        let relative = relative.as_ref();
        let found = self.parent(relative).and_then(|(parent, name)| {
            nix::sys::stat::fstatat(&parent, name, AtFlags::AT_SYMLINK_NOFOLLOW)
        });
        match found {
            Ok(stat) => Ok(Some(Stat::of_file_stat(&stat))),
            Err(Errno::ENOENT) => Ok(None),
            Err(errno) => Err(self.error(relative, errno)),
        }
    }

    /// Whether `relative` is a directory (not a symlink to one).
    pub fn is_dir(&self, relative: impl AsRef<Path>) -> bool {
        matches!(self.lstat(relative), Ok(Some(stat)) if stat.mode & libc_mode::S_IFMT == libc_mode::S_IFDIR)
    }
}

/// Operations of a [`BeneathDir`] that keep the last parent directory they opened: a batch
/// of siblings resolves it once. Only for a short run of work that removes and renames no
/// directory (a kept handle would outlive a directory removed meanwhile): staging a batch of
/// files.
pub struct Nearby<'d> {
    dir: &'d BeneathDir,
    /// The last parent opened below the root: its relative path and its handle.
    last: Option<(std::ffi::OsString, OwnedFd)>,
}

impl Nearby<'_> {
    /// Runs `f` on the parent directory of `relative` (the one kept, when it is the same)
    /// and its last name.
    fn at<T>(
        &mut self,
        relative: &Path,
        f: impl FnOnce(BorrowedFd<'_>, &OsStr) -> nix::Result<T>,
    ) -> Result<T> {
        let name = relative
            .file_name()
            .ok_or_else(|| self.dir.error(relative, Errno::EINVAL))?;
        let parent = relative.parent().unwrap_or(Path::new(""));
        if parent.as_os_str().is_empty() {
            return f(self.dir.handle.as_fd(), name).map_err(|e| self.dir.error(relative, e));
        }
        let kept = matches!(&self.last, Some((path, _)) if path == parent.as_os_str());
        if !kept {
            let opened = self
                .dir
                .open_below(parent, OFlag::O_PATH | OFlag::O_DIRECTORY)
                .map_err(|e| self.dir.error(relative, e))?;
            self.last = Some((parent.as_os_str().to_os_string(), opened));
        }
        match &self.last {
            Some((_, fd)) => f(fd.as_fd(), name).map_err(|e| self.dir.error(relative, e)),
            None => Err(self.dir.error(relative, Errno::EBADF)),
        }
    }

    /// [`BeneathDir::create_file`].
    ///
    /// # Errors
    /// As [`BeneathDir::create_file`].
    pub fn create_file(&mut self, relative: impl AsRef<Path>) -> Result<File> {
        self.at(relative.as_ref(), |parent, name| create_new(&parent, name))
            .map(File::from)
    }

    /// [`BeneathDir::symlink`].
    ///
    /// # Errors
    /// As [`BeneathDir::symlink`].
    pub fn symlink(&mut self, target: &str, relative: impl AsRef<Path>) -> Result<()> {
        self.at(relative.as_ref(), |parent, name| {
            symlink_new(target, &parent, name)
        })
    }
}

/// Creates the regular file `name` in `parent`, new (see [`BeneathDir::create_file`]).
fn create_new(parent: &impl AsFd, name: &OsStr) -> nix::Result<OwnedFd> {
    let create = || {
        nix::fcntl::openat(
            parent,
            name,
            OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_RDWR | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o666),
        )
    };
    match create() {
        Err(Errno::EEXIST) => {
            nix::unistd::unlinkat(parent, name, UnlinkatFlags::NoRemoveDir)?;
            create()
        }
        other => other,
    }
}

/// Makes the symlink `name` in `parent` (see [`BeneathDir::symlink`]): a taken name is
/// unlinked, never followed.
fn symlink_new(target: &str, parent: &impl AsFd, name: &OsStr) -> nix::Result<()> {
    match nix::unistd::symlinkat(target, parent, name) {
        Err(Errno::EEXIST) => {
            nix::unistd::unlinkat(parent, name, UnlinkatFlags::NoRemoveDir)?;
            nix::unistd::symlinkat(target, parent, name)
        }
        other => other,
    }
}

/// The file-type bits of `st_mode` (as `stat(2)` gives them).
mod libc_mode {
    pub(crate) const S_IFMT: u32 = 0o170_000;
    pub(crate) const S_IFDIR: u32 = 0o040_000;
}

/// Removes everything in the open directory `dir`, depth first, following no symlink. The
/// open directories are a stack, not a recursion: a chain of directories planted deeper than
/// the thread's stack ends in an error (out of file descriptors at worst), never a crash.
fn empty_dir(dir: OwnedFd) -> nix::Result<()> {
    /// An open directory, the names in it still to remove, and its name in its parent.
    type Frame = (
        nix::dir::Dir,
        Vec<std::ffi::CString>,
        Option<std::ffi::CString>,
    );
    fn open(dir: OwnedFd, name: Option<std::ffi::CString>) -> nix::Result<Frame> {
        let mut listing = nix::dir::Dir::from_fd(dir)?;
        let mut names = Vec::new();
        for entry in listing.iter() {
            let entry = entry?;
            let bytes = entry.file_name().to_bytes();
            if bytes != b"." && bytes != b".." {
                names.push(entry.file_name().to_owned());
            }
        }
        Ok((listing, names, name))
    }
    let mut stack = vec![open(dir, None)?];
    while let Some((listing, names, _)) = stack.last_mut() {
        let fd = listing.as_fd();
        let Some(name) = names.pop() else {
            // Emptied: remove it from its parent (the first directory stays, for the caller).
            if let Some((_, _, Some(name))) = stack.pop()
                && let Some((parent, _, _)) = stack.last()
            {
                nix::unistd::unlinkat(parent.as_fd(), name.as_c_str(), UnlinkatFlags::RemoveDir)?;
            }
            continue;
        };
        let stat = nix::sys::stat::fstatat(fd, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW)?;
        if stat.st_mode & libc_mode::S_IFMT == libc_mode::S_IFDIR {
            let below = nix::fcntl::openat(
                fd,
                name.as_c_str(),
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            )?;
            stack.push(open(below, Some(name))?);
        } else {
            nix::unistd::unlinkat(fd, name.as_c_str(), UnlinkatFlags::NoRemoveDir)?;
        }
    }
    Ok(())
}

/// An [`Error::Io`] at `path`; a symlink or a non-directory met on the way (`ELOOP`,
/// `EXDEV`, `ENOTDIR`) says that the directory changed under dsv.
fn io_error(path: PathBuf, errno: Errno) -> Error {
    let source = match errno {
        Errno::ELOOP | Errno::EXDEV => std::io::Error::new(
            std::io::Error::from(errno).kind(),
            format!(
                "{} (a symlink is on the way, or was put there while dsv wrote: dsv never follows one inside the directory it writes)",
                errno.desc()
            ),
        ),
        _ => std::io::Error::from(errno),
    };
    Error::Io { path, source }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn no_operation_follows_a_symlink_or_leaves_the_directory() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("d")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("link")).unwrap();
        std::fs::write(outside.path().join("f"), b"outside").unwrap();
        let dir = BeneathDir::open(root.path()).unwrap();

        // Through the symlink: every operation fails, nothing outside changes.
        assert!(dir.create_file("link/new").is_err());
        assert!(dir.create_dir("link/new").is_err());
        assert!(dir.symlink("x", "link/new").is_err());
        assert!(dir.remove_file("link/f").is_err());
        assert!(dir.rename("d", "link/d").is_err());
        assert!(dir.open_file("link/f", true).is_err());
        assert!(dir.lstat("link/f").is_err());
        assert!(dir.remove_dir_all("link").is_err());
        assert!(dir.create_file("../escape").is_err());
        assert!(dir.create_file("d/../../escape").is_err());
        assert_eq!(std::fs::read(outside.path().join("f")).unwrap(), b"outside");
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);

        // The last name is not followed either.
        assert!(dir.open_file("link", false).is_err());
        assert!(!dir.is_dir("link"));
        // A new file at a symlink's name replaces the link, never writes through it.
        std::os::unix::fs::symlink(outside.path().join("f"), root.path().join("f-link")).unwrap();
        dir.create_file("f-link").unwrap();
        assert!(
            std::fs::symlink_metadata(root.path().join("f-link"))
                .unwrap()
                .is_file()
        );
        assert_eq!(std::fs::read(outside.path().join("f")).unwrap(), b"outside");
        // Removing the symlink removes the link, not its target.
        dir.remove_file("link").unwrap();
        assert!(outside.path().join("f").exists());

        // Inside, everything works.
        dir.create_dir("d/e").unwrap();
        use std::io::Write;
        dir.create_file("d/e/f").unwrap().write_all(b"in").unwrap();
        dir.symlink("f", "d/e/g").unwrap();
        assert!(dir.is_dir("d/e"));
        assert_eq!(dir.lstat("d/e/f").unwrap().unwrap().size, 2);
        assert!(dir.lstat("d/e/none").unwrap().is_none());
        dir.rename("d/e/f", "d/h").unwrap();
        assert_eq!(std::fs::read(root.path().join("d/h")).unwrap(), b"in");
        std::os::unix::fs::symlink(outside.path(), root.path().join("d/e/out")).unwrap();
        dir.remove_dir_all("d").unwrap();
        assert!(!root.path().join("d").exists());
        assert_eq!(std::fs::read(outside.path().join("f")).unwrap(), b"outside");
    }

    #[test]
    fn a_new_file_never_opens_what_is_already_at_its_name() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let dir = BeneathDir::open(root.path()).unwrap();
        use std::io::Write;
        // A hard link to a file elsewhere: unlinked, and a new file made in its place.
        std::fs::hard_link(&victim, root.path().join("t1")).unwrap();
        dir.create_file("t1").unwrap().write_all(b"staged").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(root.path().join("t1")).unwrap(), b"staged");
        // A FIFO: never opened (an open for writing would wait for a reader forever).
        nix::unistd::mkfifo(&root.path().join("t2"), Mode::from_bits_truncate(0o600)).unwrap();
        dir.create_file("t2").unwrap().write_all(b"staged").unwrap();
        assert!(
            std::fs::symlink_metadata(root.path().join("t2"))
                .unwrap()
                .is_file()
        );
        // A symlink at a symlink's temporary name: replaced, not followed.
        std::os::unix::fs::symlink(&victim, root.path().join("t3")).unwrap();
        dir.symlink("elsewhere", "t3").unwrap();
        assert_eq!(
            std::fs::read_link(root.path().join("t3")).unwrap(),
            Path::new("elsewhere")
        );
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        // Reading a FIFO put in a file's place returns at once, refused.
        nix::unistd::mkfifo(&root.path().join("f"), Mode::from_bits_truncate(0o600)).unwrap();
        let file = dir.open_file("f", false).unwrap();
        assert!(crate::workspace::hash_open_file(&file, &root.path().join("f")).is_err());
        assert!(crate::workspace::open_regular(&root.path().join("f")).is_err());
    }

    #[test]
    fn nearby_operations_and_rename_then_lstat_keep_the_same_rules() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("d/e")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("link")).unwrap();
        let dir = BeneathDir::open(root.path()).unwrap();
        let mut nearby = dir.nearby();
        nearby.create_file("d/e/a").unwrap();
        nearby.create_file("d/e/b").unwrap();
        nearby.symlink("a", "d/e/c").unwrap();
        nearby.create_file("top").unwrap();
        assert!(nearby.create_file("link/x").is_err());
        assert!(nearby.symlink("a", "link/y").is_err());
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        // Beside (one parent) and across parents, with the destination's lstat.
        let stat = dir
            .rename_then_lstat("d/e/a", "d/e/renamed")
            .unwrap()
            .unwrap();
        assert_eq!(
            stat.inode,
            std::fs::symlink_metadata(root.path().join("d/e/renamed"))
                .unwrap()
                .ino()
        );
        assert!(dir.rename_then_lstat("top", "d/top").unwrap().is_some());
        assert!(dir.rename_then_lstat("d/e/b", "link/b").is_err());
        assert!(dir.rename_then_lstat("link/none", "d/x").is_err());
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_chain_of_directories_deeper_than_the_stack_is_removed() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("deep")).unwrap();
        // 3,000 levels, made relative to each other (the whole path is past PATH_MAX).
        let mut fd = nix::fcntl::open(
            &root.path().join("deep"),
            OFlag::O_RDONLY | OFlag::O_DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
        for _ in 0..3000 {
            nix::sys::stat::mkdirat(&fd, "d", Mode::from_bits_truncate(0o755)).unwrap();
            fd = nix::fcntl::openat(
                &fd,
                "d",
                OFlag::O_RDONLY | OFlag::O_DIRECTORY,
                Mode::empty(),
            )
            .unwrap();
        }
        drop(fd);
        let dir = BeneathDir::open(root.path()).unwrap();
        // On a stack far too small for a recursion 3,000 deep.
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .stack_size(128 * 1024)
                .spawn_scoped(scope, || dir.remove_dir_all("deep").unwrap())
                .unwrap()
                .join()
                .unwrap();
        });
        assert!(!root.path().join("deep").exists());
    }

    #[test]
    fn component_by_component_gives_the_same_answers() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("a/b")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("a/link")).unwrap();
        let dir = BeneathDir::open(root.path()).unwrap();
        NO_OPENAT2.store(true, Ordering::Relaxed);
        let through = dir.create_file("a/link/x").is_err();
        let escape = dir.create_file("a/../../x").is_err();
        let inside = dir.create_file("a/b/x").is_ok();
        NO_OPENAT2.store(false, Ordering::Relaxed);
        assert!(through && escape && inside);
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }
}
