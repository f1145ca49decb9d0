//! Merkle trees of directories: building them from a flat, sorted listing and walking them
//! back, and diffing two of them while skipping identical subtrees.

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::object::{EntryKind, MAX_VERSION_DIRS, MAX_VERSION_FILES, Tree, TreeEntry};
use crate::store::ObjectReader;

/// What a [`FlatEntry`] is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum FlatKind {
    /// A regular file.
    File {
        /// The owner's execute bit.
        executable: bool,
    },
    /// A directory (listed so that empty ones survive).
    Dir,
    /// A symbolic link.
    Symlink {
        /// Its target.
        target: String,
    },
}

/// One path of a version, as a flat list gives it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FlatEntry {
    /// Relative, `/`-separated path.
    pub path: String,
    /// What it is.
    #[serde(flatten)]
    pub kind: FlatKind,
    /// Bytes (a directory: total bytes below it).
    pub size: u64,
    /// File id, tree id, or BLAKE3 of a symlink's target.
    pub id: ObjectId,
}

/// Trees built from a listing.
pub struct BuiltTrees {
    /// The root tree's id.
    pub root: ObjectId,
    /// Every tree (root included), encoded, each id once, children before parents.
    pub trees: Vec<(ObjectId, Vec<u8>)>,
    /// Regular files and symlinks in the whole tree.
    pub files: u64,
    /// Total file bytes.
    pub bytes: u64,
}

/// Builds the Merkle trees of `entries`, which must be in depth-first order with siblings
/// sorted by name bytes (as [`crate::walk::scan`] and [`flatten`] give them). Directory
/// entries' `size` and `id` are ignored and computed.
///
/// The build is iterative (one frame per open directory on a heap stack, not the call
/// stack), so a listing [`MAX_TREE_DEPTH`] levels deep builds on any thread's stack.
pub fn build(entries: &[FlatEntry]) -> BuiltTrees {
    let mut trees = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut keep = |id: ObjectId, encoded: Vec<u8>| -> Result<()> {
        if seen.insert(id) {
            trees.push((id, encoded));
        }
        Ok(())
    };
    let mut builder = TreeBuilder::new();
    for entry in entries {
        builder
            .push(entry.clone(), &mut keep)
            .expect("keeping a tree does not fail");
    }
    let (root, files, bytes) = builder
        .finish(&mut keep)
        .expect("keeping a tree does not fail");
    BuiltTrees {
        root,
        trees,
        files,
        bytes,
    }
}

/// [`build`] one entry at a time: each directory's tree is encoded as soon as the listing
/// leaves it and handed to the caller (children before parents), so a listing read from a
/// file builds with memory for the open directories only (depth times the widest one).
///
/// Entries must come in depth-first order with siblings sorted by name bytes (as
/// [`crate::walk::Walker`] and [`walk_version`] give them); a directory's `size` and `id` are
/// ignored and computed.
pub struct TreeBuilder {
    /// The open directories, the root first: path (empty for the root), name, entries so far.
    open: Vec<(String, String, Tree)>,
}

impl Default for TreeBuilder {
    fn default() -> Self {
        TreeBuilder::new()
    }
}

impl TreeBuilder {
    /// A builder with only the (empty) root open.
    pub fn new() -> TreeBuilder {
        TreeBuilder {
            open: vec![(String::new(), String::new(), Tree::default())],
        }
    }

    /// Adds the next entry of the listing; `emit(id, encoded)` receives every tree the entry
    /// closes.
    ///
    /// # Errors
    /// Any error of `emit`.
    pub fn push(
        &mut self,
        entry: FlatEntry,
        emit: &mut dyn FnMut(ObjectId, Vec<u8>) -> Result<()>,
    ) -> Result<()> {
        // Close every open directory the entry is not inside.
        loop {
            let (dir, _, _) = self.open.last().expect("the root stays until the end");
            let inside = dir.is_empty()
                || (entry.path.len() > dir.len()
                    && entry.path.starts_with(dir.as_str())
                    && entry.path.as_bytes()[dir.len()] == b'/');
            if inside {
                break;
            }
            self.close(emit)?;
        }
        let (dir, _, _) = self.open.last().expect("the root stays until the end");
        let name = if dir.is_empty() {
            entry.path.clone()
        } else {
            entry.path[dir.len() + 1..].to_string()
        };
        let kind = match entry.kind {
            FlatKind::File { executable } => EntryKind::File { executable },
            FlatKind::Symlink { target } => EntryKind::Symlink { target },
            FlatKind::Dir => {
                self.open.push((entry.path, name, Tree::default()));
                return Ok(());
            }
        };
        let (_, _, tree) = self.open.last_mut().expect("the root stays until the end");
        tree.entries.push(TreeEntry {
            name,
            kind,
            size: entry.size,
            id: entry.id,
        });
        Ok(())
    }

    /// Encodes the innermost open directory, emits it and enters it in its parent.
    fn close(&mut self, emit: &mut dyn FnMut(ObjectId, Vec<u8>) -> Result<()>) -> Result<()> {
        let (_, name, tree) = self.open.pop().expect("more than the root");
        let (bytes, files) = tree.totals();
        let encoded = tree.encode();
        let id = ObjectId::of(&encoded);
        emit(id, encoded)?;
        let (_, _, parent) = self.open.last_mut().expect("the root stays until the end");
        parent.entries.push(TreeEntry {
            name,
            kind: EntryKind::Dir { files },
            size: bytes,
            id,
        });
        Ok(())
    }

    /// Closes every directory and the root: (the root tree's id, files and symlinks in the
    /// whole tree, their total bytes). The root is emitted too.
    ///
    /// # Errors
    /// Any error of `emit`.
    pub fn finish(
        mut self,
        emit: &mut dyn FnMut(ObjectId, Vec<u8>) -> Result<()>,
    ) -> Result<(ObjectId, u64, u64)> {
        while self.open.len() > 1 {
            self.close(emit)?;
        }
        let (_, _, root) = self.open.pop().expect("the root");
        let (bytes, files) = root.totals();
        let encoded = root.encode();
        let id = ObjectId::of(&encoded);
        emit(id, encoded)?;
        Ok((id, files, bytes))
    }
}

/// The deepest a path of a version may nest: at most 4096 components (so a tree at depth
/// 4096 below the root must be empty). Commit refuses deeper directories
/// ([`crate::walk::scan`]); a walk that meets a deeper tree stops with [`Error::Corrupt`].
pub const MAX_TREE_DEPTH: usize = 4096;

fn corrupt_tree(id: &ObjectId, path: &str, detail: impl std::fmt::Display) -> Error {
    let at = if path.is_empty() {
        String::new()
    } else {
        format!(" (at {path:?})")
    };
    Error::corrupt(format!("tree {id}"), format!("{detail}{at}"))
}

/// Reads tree `id`, met at `path`, `depth` levels below the walk's start, and checks it
/// before anything below it is visited: its entries' file count and bytes add up without
/// overflow, to at most [`MAX_VERSION_FILES`] files and, when the entry that names it made a
/// `claim` (bytes, files), to exactly that claim; a tree at [`MAX_TREE_DEPTH`] is empty.
/// Checked this way from the root down, a walk lists exactly as many files as the root
/// claims, whatever subtrees repeat.
fn load(
    reader: &mut ObjectReader<'_>,
    id: &ObjectId,
    path: &str,
    depth: usize,
    claim: Option<(u64, u64)>,
) -> Result<Tree> {
    let tree = reader.tree(id)?;
    if depth >= MAX_TREE_DEPTH && !tree.entries.is_empty() {
        return Err(corrupt_tree(
            id,
            path,
            format!("it nests paths more than {MAX_TREE_DEPTH} levels deep"),
        ));
    }
    let (bytes, files) = tree
        .checked_totals()
        .ok_or_else(|| corrupt_tree(id, path, "the sizes of its entries overflow"))?;
    if files > MAX_VERSION_FILES {
        return Err(corrupt_tree(
            id,
            path,
            format!("it claims {files} files, more than the limit of {MAX_VERSION_FILES}"),
        ));
    }
    if let Some((claimed_bytes, claimed_files)) = claim
        && (claimed_bytes, claimed_files) != (bytes, files)
    {
        return Err(corrupt_tree(
            id,
            path,
            format!(
                "its entries hold {files} files of {bytes} bytes, but the entry naming it claims {claimed_files} files of {claimed_bytes} bytes"
            ),
        ));
    }
    Ok(tree)
}

/// What a walk that lists paths has met, against [`MAX_VERSION_FILES`] and
/// [`MAX_VERSION_DIRS`] (times `scale` for a walk of two trees at once).
struct Budget {
    root: ObjectId,
    scale: u64,
    files: u64,
    dirs: u64,
}

impl Budget {
    fn new(root: &ObjectId, scale: u64) -> Self {
        Budget {
            root: *root,
            scale,
            files: 0,
            dirs: 0,
        }
    }

    fn dir(&mut self, path: &str) -> Result<()> {
        self.dirs += 1;
        if self.dirs > MAX_VERSION_DIRS * self.scale {
            return Err(corrupt_tree(
                &self.root,
                path,
                format!("it holds more than {MAX_VERSION_DIRS} directories"),
            ));
        }
        Ok(())
    }

    fn file(&mut self, path: &str) -> Result<()> {
        self.files += 1;
        if self.files > MAX_VERSION_FILES * self.scale {
            return Err(corrupt_tree(
                &self.root,
                path,
                format!("it holds more than {MAX_VERSION_FILES} files"),
            ));
        }
        Ok(())
    }
}

/// What a walk of a tree reaches, in depth-first order.
pub enum Reached<'a> {
    /// A tree (the root or a subdirectory's).
    Tree(ObjectId),
    /// A regular file: its path from the root, its id and its chunks in order (a file of
    /// more than one chunk has a file map keyed by its id).
    File {
        /// Relative, `/`-separated path.
        path: &'a str,
        /// The file id.
        id: ObjectId,
        /// Its chunk ids (empty for an empty file).
        chunks: Vec<ObjectId>,
    },
}

/// Visits every tree and file reachable from tree `root`. Trees already in `seen` (and
/// everything below them) are skipped, so one `seen` set shared across the versions of a
/// store walks each shared subtree once; pass `None` to visit every path (e.g. when paths
/// are filtered). Chunk lists come from file maps, which must be in the store; the chunks
/// themselves need not be.
///
/// The walk is iterative and bounded: each tree is checked as [`flatten`] checks it (depth
/// at most [`MAX_TREE_DEPTH`], entries adding up to the claim of the entry naming it), and
/// a walk of every path (`seen` = `None`) stops after [`MAX_VERSION_FILES`] files or
/// [`MAX_VERSION_DIRS`] directories.
///
/// # Errors
/// [`Error::MissingObject`] for a missing tree or file map, [`Error::Corrupt`] (also for a
/// tree past the limits), [`Error::Io`], or the first error of `visit`.
pub fn walk_reachable(
    reader: &mut ObjectReader<'_>,
    root: &ObjectId,
    mut seen: Option<&mut std::collections::HashSet<ObjectId>>,
    visit: &mut dyn FnMut(Reached<'_>) -> Result<()>,
) -> Result<()> {
    let mut budget = seen.is_none().then(|| Budget::new(root, 1));
    /// A tree to visit: its id, path, depth and the (bytes, files) its entry claims.
    type Pending = (ObjectId, String, usize, Option<(u64, u64)>);
    let mut stack: Vec<Pending> = vec![(*root, String::new(), 0, None)];
    while let Some((tree_id, prefix, depth, claim)) = stack.pop() {
        if let Some(seen) = seen.as_deref_mut()
            && !seen.insert(tree_id)
        {
            continue;
        }
        visit(Reached::Tree(tree_id))?;
        for entry in load(reader, &tree_id, &prefix, depth, claim)?.entries {
            let path = if prefix.is_empty() {
                entry.name
            } else {
                format!("{prefix}/{}", entry.name)
            };
            match entry.kind {
                EntryKind::Dir { files } => {
                    if let Some(budget) = &mut budget {
                        budget.dir(&path)?;
                    }
                    stack.push((entry.id, path, depth + 1, Some((entry.size, files))));
                }
                EntryKind::File { .. } => {
                    if let Some(budget) = &mut budget {
                        budget.file(&path)?;
                    }
                    let chunks = reader.chunk_ids(&entry.id, entry.size)?;
                    visit(Reached::File {
                        path: &path,
                        id: entry.id,
                        chunks,
                    })?;
                }
                EntryKind::Symlink { .. } => {}
            }
        }
    }
    Ok(())
}

/// Lists every path of tree `root` in depth-first order, siblings sorted (the inverse of
/// [`build`]).
///
/// The walk is iterative and bounded before it lists anything below a tree: no path nests
/// deeper than [`MAX_TREE_DEPTH`] levels, each directory entry's file count and bytes equal
/// what its tree's entries add up to (so the listing holds exactly the files the root
/// claims, at most [`MAX_VERSION_FILES`]), and at most [`MAX_VERSION_DIRS`] directories.
///
/// # Errors
/// Reading or decoding a tree fails ([`Error::MissingObject`], [`Error::Corrupt`]);
/// [`Error::Corrupt`] naming the tree that breaks a limit above; [`Error::UnsafePath`] for
/// a symlink whose target leaves the tree.
pub fn flatten(reader: &mut ObjectReader<'_>, root: &ObjectId) -> Result<Vec<FlatEntry>> {
    flatten_claimed(reader, root, None)
}

/// [`flatten`] of `version`'s tree, also checking that the root holds the files and bytes
/// the version claims.
///
/// # Errors
/// As [`flatten`]; [`Error::Corrupt`] when the root's totals are not the version's.
pub fn flatten_version(
    reader: &mut ObjectReader<'_>,
    version: &crate::object::Version,
) -> Result<Vec<FlatEntry>> {
    flatten_claimed(reader, &version.tree, Some((version.bytes, version.files)))
}

fn flatten_claimed(
    reader: &mut ObjectReader<'_>,
    root: &ObjectId,
    claim: Option<(u64, u64)>,
) -> Result<Vec<FlatEntry>> {
    Walk::start(reader, root, claim)?.collect()
}

/// [`flatten`] one path at a time: the paths below tree `root` in depth-first order,
/// siblings sorted, with the same checks, holding only the trees on the current path.
///
/// # Errors
/// Reading the root fails.
pub fn walk_tree<'r, 'a>(
    reader: &'r mut ObjectReader<'a>,
    root: &ObjectId,
) -> Result<Walk<'r, 'a>> {
    Walk::start(reader, root, None)
}

/// [`flatten_version`] one path at a time: the paths of `version`'s tree in depth-first
/// order, siblings sorted, with the same checks, holding only the trees on the current path
/// (memory grows with depth times the widest directory, not with the version's files).
///
/// # Errors
/// Reading the root tree fails, or the iterator gives an error, as [`flatten_version`]; it
/// ends after an error.
pub fn walk_version<'r, 'a>(
    reader: &'r mut ObjectReader<'a>,
    version: &crate::object::Version,
) -> Result<Walk<'r, 'a>> {
    Walk::start(reader, &version.tree, Some((version.bytes, version.files)))
}

/// Where the entry at `path` is in `entries`, a listing in [`crate::names::path_order`] (as
/// [`flatten_version`] gives it): a binary search, O(log n).
pub fn position(entries: &[FlatEntry], path: &str) -> Option<usize> {
    entries
        .binary_search_by(|e| crate::names::path_order(&e.path, path))
        .ok()
}

/// A listing in [`crate::names::path_order`] (a [`walk_version`]) read forward on demand:
/// what a merge with another listing in that order asks of it, one path at a time, holding
/// one entry.
pub struct Cursor<I> {
    walk: I,
    next: Option<FlatEntry>,
    /// Entries taken from the walk.
    taken: usize,
    ended: bool,
    /// Whether `next` was found by a seek (so it is not handed over as passed).
    found: bool,
}

impl<I: Iterator<Item = Result<FlatEntry>>> Cursor<I> {
    /// A cursor before the first entry of `walk`.
    pub fn new(walk: I) -> Cursor<I> {
        Cursor {
            walk,
            next: None,
            taken: 0,
            ended: false,
            found: false,
        }
    }

    /// The entry at `path` and its position in the listing (from 0), if the listing has
    /// one, passing every entry before it. Paths must be asked in path order: an entry
    /// passed is not seen again.
    ///
    /// # Errors
    /// The walk's.
    pub fn seek(&mut self, path: &str) -> Result<Option<(usize, &FlatEntry)>> {
        self.seek_passing(path, |_, _| Ok(()))
    }

    /// As [`Cursor::seek`], handing each entry passed (those before `path`, which a merge
    /// with another listing finds only here) to `passed` with its position, in order.
    ///
    /// # Errors
    /// The walk's, and `passed`'s.
    pub fn seek_passing(
        &mut self,
        path: &str,
        mut passed: impl FnMut(usize, FlatEntry) -> Result<()>,
    ) -> Result<Option<(usize, &FlatEntry)>> {
        loop {
            if self.next.is_none() && !self.ended {
                self.next = self.walk.next().transpose()?;
                self.ended = self.next.is_none();
                self.taken += usize::from(!self.ended);
            }
            let order = match &self.next {
                None => return Ok(None),
                Some(entry) => crate::names::path_order(&entry.path, path),
            };
            match order {
                std::cmp::Ordering::Less => {
                    if let Some(entry) = self.next.take()
                        && !std::mem::take(&mut self.found)
                    {
                        passed(self.taken - 1, entry)?;
                    }
                }
                std::cmp::Ordering::Equal => {
                    self.found = true;
                    return Ok(self.next.as_ref().map(|entry| (self.taken - 1, entry)));
                }
                std::cmp::Ordering::Greater => return Ok(None),
            }
        }
    }

    /// Hands every entry not yet passed or found to `passed` with its position, in order:
    /// the end of a merge.
    ///
    /// # Errors
    /// The walk's, and `passed`'s.
    pub fn drain(&mut self, mut passed: impl FnMut(usize, FlatEntry) -> Result<()>) -> Result<()> {
        loop {
            if self.next.is_none() && !self.ended {
                self.next = self.walk.next().transpose()?;
                self.ended = self.next.is_none();
                self.taken += usize::from(!self.ended);
            }
            match self.next.take() {
                Some(_) if std::mem::take(&mut self.found) => {}
                Some(entry) => passed(self.taken - 1, entry)?,
                None => return Ok(()),
            }
        }
    }
}

/// An iterator over the paths of a tree (see [`walk_version`]).
pub struct Walk<'r, 'a> {
    reader: &'r mut ObjectReader<'a>,
    budget: Budget,
    /// One frame per open directory: its remaining entries, its path prefix and its id.
    stack: Vec<(std::vec::IntoIter<TreeEntry>, String, ObjectId)>,
}

impl<'r, 'a> Walk<'r, 'a> {
    fn start(
        reader: &'r mut ObjectReader<'a>,
        root: &ObjectId,
        claim: Option<(u64, u64)>,
    ) -> Result<Walk<'r, 'a>> {
        let tree = load(reader, root, "", 0, claim)?;
        Ok(Walk {
            reader,
            budget: Budget::new(root, 1),
            stack: vec![(tree.entries.into_iter(), String::new(), *root)],
        })
    }

    fn step(&mut self) -> Result<Option<FlatEntry>> {
        while let Some(top) = self.stack.last_mut() {
            let Some(entry) = top.0.next() else {
                self.stack.pop();
                continue;
            };
            let path = format!("{}{}", top.1, entry.name);
            let parent = top.2;
            return Ok(Some(match entry.kind {
                EntryKind::Dir { files } => {
                    self.budget.dir(&path)?;
                    let depth = self.stack.len();
                    let child = load(
                        self.reader,
                        &entry.id,
                        &path,
                        depth,
                        Some((entry.size, files)),
                    )?;
                    self.stack
                        .push((child.entries.into_iter(), format!("{path}/"), entry.id));
                    FlatEntry {
                        path,
                        kind: FlatKind::Dir,
                        size: entry.size,
                        id: entry.id,
                    }
                }
                EntryKind::File { executable } => {
                    self.budget.file(&path)?;
                    FlatEntry {
                        path,
                        kind: FlatKind::File { executable },
                        size: entry.size,
                        id: entry.id,
                    }
                }
                EntryKind::Symlink { target } => {
                    self.budget.file(&path)?;
                    crate::names::check_symlink_target(&path, &target).map_err(|reason| {
                        Error::UnsafePath {
                            path: path.clone(),
                            tree: parent.to_hex(),
                            reason,
                        }
                    })?;
                    FlatEntry {
                        path,
                        kind: FlatKind::Symlink { target },
                        size: entry.size,
                        id: entry.id,
                    }
                }
            }));
        }
        Ok(None)
    }
}

impl Iterator for Walk<'_, '_> {
    type Item = Result<FlatEntry>;

    fn next(&mut self) -> Option<Result<FlatEntry>> {
        let step = self.step();
        if step.is_err() {
            self.stack.clear();
        }
        step.transpose()
    }
}

/// What [`check_version`] learned of each tree: its bytes, files and height (the most
/// components of a path in it), so trees shared by versions are checked once.
pub type CheckedTrees = std::collections::HashMap<ObjectId, (u64, u64, usize)>;

/// Checks `version`'s whole tree DAG without listing a single path, reading each distinct
/// tree once (trees already in `checked` are not read again): every directory entry's file
/// count and bytes equal its tree's totals, no path is deeper than [`MAX_TREE_DEPTH`], no
/// tree claims more than [`MAX_VERSION_FILES`] files, and the root's totals equal the
/// version's `files` and `bytes`. A version that passes lists exactly the files it claims.
/// Fetch runs it on every version it records, so a hostile remote's tree is refused before
/// any command walks it.
///
/// # Errors
/// [`Error::Corrupt`] naming the first tree that breaks a rule; [`Error::MissingObject`],
/// [`Error::Io`] reading a tree.
pub fn check_version(
    reader: &mut ObjectReader<'_>,
    version: &crate::object::Version,
    checked: &mut CheckedTrees,
) -> Result<()> {
    // Post-order without recursion: a tree is pushed to expand (its unchecked subtrees go
    // above it), then again to combine once they are all checked.
    let mut stack = vec![(version.tree, 0usize, false)];
    while let Some((id, depth, expanded)) = stack.pop() {
        if checked.contains_key(&id) {
            continue;
        }
        let tree = reader.tree(&id)?;
        if depth >= MAX_TREE_DEPTH && !tree.entries.is_empty() {
            return Err(corrupt_tree(
                &id,
                "",
                format!("it nests paths more than {MAX_TREE_DEPTH} levels deep"),
            ));
        }
        if !expanded {
            stack.push((id, depth, true));
            for entry in &tree.entries {
                if matches!(entry.kind, EntryKind::Dir { .. }) && !checked.contains_key(&entry.id) {
                    stack.push((entry.id, depth + 1, false));
                }
            }
            continue;
        }
        let (bytes, files) = tree
            .checked_totals()
            .ok_or_else(|| corrupt_tree(&id, "", "the sizes of its entries overflow"))?;
        if files > MAX_VERSION_FILES {
            return Err(corrupt_tree(
                &id,
                "",
                format!("it claims {files} files, more than the limit of {MAX_VERSION_FILES}"),
            ));
        }
        let mut height = usize::from(!tree.entries.is_empty());
        for entry in &tree.entries {
            let EntryKind::Dir { files: claimed } = entry.kind else {
                continue;
            };
            let &(child_bytes, child_files, child_height) =
                checked.get(&entry.id).ok_or_else(|| Error::MissingObject {
                    id: entry.id.to_hex(),
                    what: "tree",
                })?;
            if (child_bytes, child_files) != (entry.size, claimed) {
                return Err(corrupt_tree(
                    &entry.id,
                    &entry.name,
                    format!(
                        "its entries hold {child_files} files of {child_bytes} bytes, but tree {id} claims {claimed} files of {} bytes",
                        entry.size
                    ),
                ));
            }
            height = height.max(child_height + 1);
        }
        if height > MAX_TREE_DEPTH {
            return Err(corrupt_tree(
                &id,
                "",
                format!("it nests paths more than {MAX_TREE_DEPTH} levels deep"),
            ));
        }
        checked.insert(id, (bytes, files, height));
    }
    let &(bytes, files, _) = checked
        .get(&version.tree)
        .ok_or_else(|| Error::MissingObject {
            id: version.tree.to_hex(),
            what: "tree",
        })?;
    if (bytes, files) != (version.bytes, version.files) {
        return Err(corrupt_tree(
            &version.tree,
            "",
            format!(
                "it holds {files} files of {bytes} bytes, but its version claims {} files of {} bytes",
                version.files, version.bytes
            ),
        ));
    }
    Ok(())
}

/// Checks a listing that commit or import is about to record against the limits every
/// version obeys: at most [`MAX_VERSION_FILES`] files and symlinks, [`MAX_VERSION_DIRS`]
/// directories, and [`MAX_TREE_DEPTH`] components in a path.
///
/// # Errors
/// The first offending path (empty for a count) and why.
pub fn check_listing(entries: &[FlatEntry]) -> std::result::Result<(), (String, String)> {
    let (mut files, mut dirs) = (0u64, 0u64);
    for entry in entries {
        if entry.path.split('/').count() > MAX_TREE_DEPTH {
            return Err((
                entry.path.clone(),
                format!("it is nested more than {MAX_TREE_DEPTH} levels deep"),
            ));
        }
        match entry.kind {
            FlatKind::Dir => dirs += 1,
            _ => files += 1,
        }
    }
    check_counts(files, dirs).map_err(|reason| (String::new(), reason))
}

/// Refuses a version of more than [`MAX_VERSION_FILES`] files and symlinks or
/// [`MAX_VERSION_DIRS`] directories (what [`check_listing`] checks of a listing's counts).
///
/// # Errors
/// The reason.
pub fn check_counts(files: u64, dirs: u64) -> std::result::Result<(), String> {
    if files > MAX_VERSION_FILES {
        return Err(format!(
            "{files} files, more than the limit of {MAX_VERSION_FILES} in one version"
        ));
    }
    if dirs > MAX_VERSION_DIRS {
        return Err(format!(
            "{dirs} directories, more than the limit of {MAX_VERSION_DIRS} in one version"
        ));
    }
    Ok(())
}

/// Returns the first symlink whose target passes *through* another symlink of the listing
/// (uses it as a directory), or `None`.
///
/// Each link is also checked on its own ([`crate::names::check_symlink_target`]), but only
/// lexically: `d/l -> ..` is inside, yet `x -> d/l/..` resolves through `d/l` to the parent
/// of the root. Refusing links that traverse other links closes that hole.
pub fn symlink_through_symlink(entries: &[FlatEntry]) -> Option<&FlatEntry> {
    let links: std::collections::HashSet<&str> = entries
        .iter()
        .filter(|e| matches!(e.kind, FlatKind::Symlink { .. }))
        .map(|e| e.path.as_str())
        .collect();
    entries.iter().find(|entry| {
        let FlatKind::Symlink { target } = &entry.kind else {
            return false;
        };
        let mut resolved: Vec<&str> = entry.path.split('/').collect();
        resolved.pop();
        let components: Vec<&str> = target
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .collect();
        components.iter().enumerate().any(|(i, component)| {
            if *component == ".." {
                resolved.pop();
                return false;
            }
            resolved.push(component);
            i + 1 < components.len() && links.contains(resolved.join("/").as_str())
        })
    })
}

/// Finds the entry at `path` (`/`-separated; empty for the root) in tree `root`, reading only
/// the trees on that path (one per component, each searched by bisection: entries are
/// sorted by name bytes) and checking each as [`walk_version`] does (its totals against
/// its parent's entry, depth, a symlink's target).
///
/// Returns `None` when no such path exists; the root itself is a directory entry with an
/// empty path.
///
/// # Errors
/// [`Error::Corrupt`] or [`Error::UnsafePath`] for a tree on the path that breaks a rule;
/// [`Error::MissingObject`], [`Error::Io`] reading one.
pub fn lookup(
    reader: &mut ObjectReader<'_>,
    root: &ObjectId,
    path: &str,
) -> Result<Option<FlatEntry>> {
    let path = path.trim_matches('/');
    let mut tree = load(reader, root, "", 0, None)?;
    let mut current = FlatEntry {
        path: String::new(),
        kind: FlatKind::Dir,
        size: tree.totals().0,
        id: *root,
    };
    if path.is_empty() {
        return Ok(Some(current));
    }
    // The claim of the directory entry last found: its tree must hold those totals.
    let mut claim = None;
    for (depth, component) in path.split('/').enumerate() {
        if current.kind != FlatKind::Dir {
            return Ok(None);
        }
        if depth > 0 {
            tree = load(reader, &current.id, &current.path, depth, claim)?;
        }
        let Ok(index) = tree
            .entries
            .binary_search_by(|e| e.name.as_bytes().cmp(component.as_bytes()))
        else {
            return Ok(None);
        };
        let entry = tree.entries[index].clone();
        let joined = if current.path.is_empty() {
            component.to_string()
        } else {
            format!("{}/{component}", current.path)
        };
        let kind = match entry.kind {
            EntryKind::Dir { files } => {
                claim = Some((entry.size, files));
                FlatKind::Dir
            }
            EntryKind::File { executable } => FlatKind::File { executable },
            EntryKind::Symlink { target } => {
                crate::names::check_symlink_target(&joined, &target).map_err(|reason| {
                    Error::UnsafePath {
                        path: joined.clone(),
                        tree: current.id.to_hex(),
                        reason,
                    }
                })?;
                FlatKind::Symlink { target }
            }
        };
        current = FlatEntry {
            path: joined,
            kind,
            size: entry.size,
            id: entry.id,
        };
    }
    Ok(Some(current))
}

/// How a path differs between two versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    /// Only in the newer.
    Added,
    /// In both, with different content, kind or mode.
    Modified,
    /// Only in the older.
    Deleted,
    /// Deleted at `from` and added at `to` with the same content, kind and mode
    /// ([`detect_renames`]).
    Renamed,
}

/// One changed file or symlink (directories are not listed; their contents are).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Change {
    /// The path.
    pub path: String,
    /// How it changed.
    pub change: ChangeKind,
    /// The older entry.
    pub old: Option<FlatEntry>,
    /// The newer entry.
    pub new: Option<FlatEntry>,
    /// A rename: the older path (`old`'s); `None` (and left out of JSON) otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// A rename: the newer path (`new`'s, the same as `path`); `None` (and left out of
    /// JSON) otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
}

impl Change {
    /// The rename of `old` to `new` (which have the same [`rename_key`]), listed at `new`'s
    /// path.
    pub fn renamed(old: FlatEntry, new: FlatEntry) -> Change {
        Change {
            path: new.path.clone(),
            change: ChangeKind::Renamed,
            from: Some(old.path.clone()),
            to: Some(new.path.clone()),
            old: Some(old),
            new: Some(new),
        }
    }
}

/// What makes a deleted and an added entry one entry moved: a regular file's content id and
/// executable bit, or a symlink's target id. `None` for a directory and an empty file (every
/// empty file has the same id, so that says nothing of where one went, as git holds).
pub fn rename_key(entry: &FlatEntry) -> Option<(ObjectId, u8)> {
    match entry.kind {
        FlatKind::File { executable } if entry.size > 0 => Some((entry.id, u8::from(executable))),
        FlatKind::Symlink { .. } => Some((entry.id, 2)),
        _ => None,
    }
}

/// The renames among entries `deleted` and `added`: each pair has the same [`rename_key`].
/// Where several entries share a key, the pairing is deterministic: within a key, an
/// added entry goes first to the deleted one of the same file name (the last path element:
/// a file moved between directories), then the rest pair in path order. Returns the pairs
/// (older, newer) in the order of the newer paths.
pub fn pair_renames(deleted: Vec<FlatEntry>, added: Vec<FlatEntry>) -> Vec<(FlatEntry, FlatEntry)> {
    use std::collections::{BTreeMap, HashMap, VecDeque};
    type Key = (ObjectId, u8);
    let mut groups: BTreeMap<Key, (Vec<FlatEntry>, Vec<FlatEntry>)> = BTreeMap::new();
    for entry in deleted {
        if let Some(key) = rename_key(&entry) {
            groups.entry(key).or_default().0.push(entry);
        }
    }
    for entry in added {
        if let Some(key) = rename_key(&entry)
            && let Some(group) = groups.get_mut(&key)
        {
            group.1.push(entry);
        }
    }
    let name = |path: &str| path.rsplit('/').next().unwrap_or(path).to_string();
    let mut pairs = Vec::new();
    for (_, (mut olds, mut news)) in groups {
        if news.is_empty() {
            continue;
        }
        olds.sort_by(|a, b| a.path.cmp(&b.path));
        news.sort_by(|a, b| a.path.cmp(&b.path));
        let mut by_name: HashMap<String, VecDeque<usize>> = HashMap::new();
        for (i, old) in olds.iter().enumerate() {
            by_name.entry(name(&old.path)).or_default().push_back(i);
        }
        let mut taken = vec![false; olds.len()];
        let mut matched: Vec<Option<usize>> = vec![None; news.len()];
        for (j, new) in news.iter().enumerate() {
            if let Some(i) = by_name
                .get_mut(&name(&new.path))
                .and_then(VecDeque::pop_front)
            {
                taken[i] = true;
                matched[j] = Some(i);
            }
        }
        let mut free = (0..olds.len()).filter(|i| !taken[*i]);
        for slot in matched.iter_mut().filter(|m| m.is_none()) {
            match free.next() {
                Some(i) => *slot = Some(i),
                None => break,
            }
        }
        let mut olds: Vec<Option<FlatEntry>> = olds.into_iter().map(Some).collect();
        for (new, old) in news.into_iter().zip(matched) {
            if let Some(old) = old.and_then(|i| olds[i].take()) {
                pairs.push((old, new));
            }
        }
    }
    pairs.sort_by(|a, b| a.1.path.cmp(&b.1.path));
    pairs
}

/// `changes` with each deleted entry and added entry that [`pair_renames`] pairs given as
/// one [`ChangeKind::Renamed`] change, at the added entry's place; the order is otherwise
/// kept.
pub fn detect_renames(changes: Vec<Change>) -> Vec<Change> {
    let entry_of = |change: &Change, kind: ChangeKind| {
        if change.change != kind {
            return None;
        }
        let entry = if kind == ChangeKind::Deleted {
            &change.old
        } else {
            &change.new
        };
        entry.as_ref().filter(|e| rename_key(e).is_some()).cloned()
    };
    let deleted: Vec<FlatEntry> = changes
        .iter()
        .filter_map(|c| entry_of(c, ChangeKind::Deleted))
        .collect();
    if deleted.is_empty() {
        return changes;
    }
    let added: Vec<FlatEntry> = changes
        .iter()
        .filter_map(|c| entry_of(c, ChangeKind::Added))
        .collect();
    let pairs = pair_renames(deleted, added);
    if pairs.is_empty() {
        return changes;
    }
    let from: std::collections::HashSet<String> =
        pairs.iter().map(|(old, _)| old.path.clone()).collect();
    let mut renamed: std::collections::HashMap<String, (FlatEntry, FlatEntry)> = pairs
        .into_iter()
        .map(|(old, new)| (new.path.clone(), (old, new)))
        .collect();
    changes
        .into_iter()
        .filter_map(|change| match change.change {
            ChangeKind::Deleted if from.contains(&change.path) => None,
            ChangeKind::Added => match renamed.remove(&change.path) {
                Some((old, new)) => Some(Change::renamed(old, new)),
                None => Some(change),
            },
            _ => Some(change),
        })
        .collect()
}

/// What [`diff`] found.
#[derive(Debug, Clone, Default)]
pub struct TreeDiff {
    /// The changed files and symlinks (and directories that hold no file), in
    /// [`crate::names::path_order`].
    pub changes: Vec<Change>,
    /// How many tree objects the diff read (both sides, the two roots included): a diff of
    /// versions that differ in a few files reads only the trees on those files' paths.
    pub trees_read: u64,
}

/// Compares two trees (`None` = empty), descending only into subtrees whose ids differ.
///
/// Returns the changed files and symlinks in [`crate::names::path_order`], and how many trees
/// were read. [`diff_each`] collected.
///
/// # Errors
/// As [`diff_each`].
pub fn diff(
    reader: &mut ObjectReader<'_>,
    old: Option<&ObjectId>,
    new: Option<&ObjectId>,
) -> Result<TreeDiff> {
    let mut changes = Vec::new();
    let trees_read = diff_each(reader, old, new, |change| {
        changes.push(change);
        Ok(())
    })?;
    Ok(TreeDiff {
        changes,
        trees_read,
    })
}

/// Compares two trees (`None` = empty), descending only into subtrees whose ids differ, and
/// hands each change to `visit` as it is found, in [`crate::names::path_order`] (depth first,
/// siblings sorted by name bytes: the order `ls` lists). Holds only the trees on the current
/// path of each side, never the changes: a diff of two versions of millions of files costs
/// their depth, not their size. Returns how many trees were read.
///
/// The walk is iterative and bounded as [`flatten`] is (each side at most
/// [`MAX_TREE_DEPTH`] levels, its directory entries' claims checked, at most
/// [`MAX_VERSION_FILES`] files and [`MAX_VERSION_DIRS`] directories).
///
/// # Errors
/// Reading a tree fails; [`Error::Corrupt`] naming a tree that breaks a limit; the first
/// error of `visit`.
pub fn diff_each(
    reader: &mut ObjectReader<'_>,
    old: Option<&ObjectId>,
    new: Option<&ObjectId>,
    mut visit: impl FnMut(Change) -> Result<()>,
) -> Result<u64> {
    let mut trees_read = 0u64;
    let root = new.or(old).copied().unwrap_or(ObjectId([0; 32]));
    let mut budget = Budget::new(&root, 2);
    let mut open = |reader: &mut ObjectReader<'_>,
                    old: DiffSide,
                    new: DiffSide,
                    prefix: String,
                    depth: usize|
     -> Result<Option<DiffFrame>> {
        if old.map(|(id, _)| id) == new.map(|(id, _)| id) {
            return Ok(None);
        }
        let mut side = |side: DiffSide| -> Result<Tree> {
            trees_read += u64::from(side.is_some());
            side.map(|(id, claim)| load(reader, &id, prefix.trim_end_matches('/'), depth, claim))
                .transpose()
                .map(Option::unwrap_or_default)
        };
        let old = side(old)?;
        let new = side(new)?;
        Ok(Some(DiffFrame {
            old,
            new,
            i: 0,
            j: 0,
            prefix,
            depth,
        }))
    };
    let mut stack: Vec<DiffFrame> = Vec::new();
    if let Some(frame) = open(
        reader,
        old.map(|id| (*id, None)),
        new.map(|id| (*id, None)),
        String::new(),
        0,
    )? {
        stack.push(frame);
    }
    while let Some(frame) = stack.last_mut() {
        let Some((a, b)) = frame.next_pair() else {
            stack.pop();
            continue;
        };
        let a = a.map(|i| &frame.old.entries[i]);
        let b = b.map(|j| &frame.new.entries[j]);
        let name = a
            .or(b)
            .map(|e| e.name.as_str())
            .expect("one side is present");
        let path = format!("{}{name}", frame.prefix);
        for e in [a, b].into_iter().flatten() {
            match e.kind {
                EntryKind::Dir { .. } => budget.dir(&path)?,
                _ => budget.file(&path)?,
            }
        }
        let (old_dir, new_dir) = (dir_side(a), dir_side(b));
        let (old_leaf, new_leaf) = if old_dir.is_some() && new_dir.is_some() {
            (None, None)
        } else {
            (leaf_entry(a, &path), leaf_entry(b, &path))
        };
        let depth = frame.depth + 1;
        // The entry's own change comes before what is below it (path order).
        if let Some(change) = change_between(old_leaf, new_leaf) {
            visit(change)?;
        }
        if (old_dir.is_some() || new_dir.is_some())
            && let Some(below) = open(reader, old_dir, new_dir, format!("{path}/"), depth)?
        {
            stack.push(below);
        }
    }
    Ok(trees_read)
}

/// One side of a directory [`diff_each`] may open: the tree's id and the claims its parent's
/// entry makes of it (total size, files), `None` for a side without that directory.
type DiffSide = Option<(ObjectId, Option<(u64, u64)>)>;

/// One directory [`diff_each`] has open on both sides: its trees, the next entry of each,
/// its path (with a trailing `/`, empty at the root) and its depth.
struct DiffFrame {
    old: Tree,
    new: Tree,
    i: usize,
    j: usize,
    prefix: String,
    depth: usize,
}

impl DiffFrame {
    /// The index of the next entry in name order in the old side, the new side, or both
    /// when both have one of that name (a merge of the two sorted lists); `None` once both
    /// are done.
    fn next_pair(&mut self) -> Option<(Option<usize>, Option<usize>)> {
        let (i, j) = (self.i, self.j);
        let a = self.old.entries.get(i);
        let b = self.new.entries.get(j);
        let order = match (a, b) {
            (None, None) => return None,
            (Some(a), Some(b)) => a.name.as_bytes().cmp(b.name.as_bytes()),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
        };
        match order {
            std::cmp::Ordering::Less => {
                self.i += 1;
                Some((Some(i), None))
            }
            std::cmp::Ordering::Greater => {
                self.j += 1;
                Some((None, Some(j)))
            }
            std::cmp::Ordering::Equal => {
                self.i += 1;
                self.j += 1;
                Some((Some(i), Some(j)))
            }
        }
    }
}

/// The side `entry` gives a directory diff: its tree and claims when it is a directory.
fn dir_side(entry: Option<&TreeEntry>) -> DiffSide {
    entry.and_then(|e| match e.kind {
        EntryKind::Dir { files } => Some((e.id, Some((e.size, files)))),
        _ => None,
    })
}

/// `entry` at `path` as a compared leaf: files and symlinks are compared; a directory only
/// when it holds no file at all (otherwise its contents speak for it).
fn leaf_entry(entry: Option<&TreeEntry>, path: &str) -> Option<FlatEntry> {
    entry
        .filter(|e| !matches!(e.kind, EntryKind::Dir { files } if files > 0))
        .map(|e| FlatEntry {
            path: path.to_string(),
            kind: match &e.kind {
                EntryKind::File { executable } => FlatKind::File {
                    executable: *executable,
                },
                EntryKind::Symlink { target } => FlatKind::Symlink {
                    target: target.clone(),
                },
                EntryKind::Dir { .. } => FlatKind::Dir,
            },
            size: e.size,
            id: e.id,
        })
}

fn leaf_change(old: Option<&FlatEntry>, new: Option<&FlatEntry>) -> Option<ChangeKind> {
    match (old, new) {
        (None, None) => None,
        (None, Some(_)) => Some(ChangeKind::Added),
        (Some(_), None) => Some(ChangeKind::Deleted),
        (Some(x), Some(y)) if x.kind == FlatKind::Dir && y.kind == FlatKind::Dir => None,
        (Some(x), Some(y)) => (x.kind != y.kind || x.id != y.id).then_some(ChangeKind::Modified),
    }
}

/// Compares two flat listings with the rules of [`diff`]: files and symlinks by kind, mode and
/// id; a directory only where it holds no file on that side. Returns the changes sorted by
/// path.
///
/// A [`StreamingDiff`] over the listings in [`crate::names::path_order`] (the order
/// [`flatten`] and a scan give); a listing in another order is sorted first (by reference).
#[cfg(test)]
pub(crate) fn diff_flat(old: &[FlatEntry], new: &[FlatEntry]) -> Vec<Change> {
    fn in_order(entries: &[FlatEntry]) -> Vec<&FlatEntry> {
        let mut sorted: Vec<&FlatEntry> = entries.iter().collect();
        sorted.sort_by(|a, b| crate::names::path_order(&a.path, &b.path));
        sorted
    }
    diff_in_order(
        in_order(old).into_iter().cloned(),
        in_order(new).into_iter().cloned(),
    )
}

/// `diff_flat` fed one path at a time: two listings in [`crate::names::path_order`] merged
/// by the caller, who hands over the entries each side has at every path. It holds only the
/// open directories of each side and what changed, never a listing: a status of a million
/// files costs what changed.
///
/// A new side's file whose id is not known yet (a file still to be hashed) is given with a
/// `pending` number; [`StreamingDiff::finish`] asks for its id then.
#[derive(Default)]
pub struct StreamingDiff {
    changes: Vec<Change>,
    /// Per side (0 old, 1 new): the directories open at the current path.
    open: [Vec<OpenDir>; 2],
    /// Pairs whose change is decided later: a directory on one side only (a change only when
    /// it holds no file on that side, known once it closes), or a pending file.
    deferred: Vec<Deferred>,
}

struct OpenDir {
    path: String,
    holds_file: bool,
    /// The deferred pair this directory decides.
    deferred: Option<usize>,
}

struct Deferred {
    old: Option<FlatEntry>,
    new: Option<FlatEntry>,
    /// The new side's file id comes from `finish`'s resolver.
    pending: Option<usize>,
    /// Per side: its directory held a file (so it is no leaf), once it closed.
    holds_file: [bool; 2],
}

impl StreamingDiff {
    /// An empty diff.
    pub fn new() -> StreamingDiff {
        StreamingDiff::default()
    }

    /// The entries the old and new listing have at one path (at least one `Some`), in path
    /// order after every path given before. `pending` marks `new` as a file whose id is not
    /// known yet (see [`StreamingDiff::finish`]).
    pub fn pair(&mut self, old: Option<FlatEntry>, new: Option<FlatEntry>, pending: Option<usize>) {
        let is_dir = |e: &Option<FlatEntry>| e.as_ref().is_some_and(|e| e.kind == FlatKind::Dir);
        for (side, entry) in [(0, &old), (1, &new)] {
            if let Some(entry) = entry {
                self.close_until(side, &entry.path);
            }
        }
        let (old_dir, new_dir) = (is_dir(&old), is_dir(&new));
        let mut deferred = None;
        if old_dir && new_dir {
            // A directory on both sides is never a change itself.
        } else if old_dir || new_dir || pending.is_some() {
            self.deferred.push(Deferred {
                old: old.clone(),
                new: new.clone(),
                pending,
                holds_file: [false; 2],
            });
            deferred = Some(self.deferred.len() - 1);
        } else if let Some(change) = change_between(old.clone(), new.clone()) {
            self.changes.push(change);
        }
        for (side, entry) in [(0, old), (1, new)] {
            let Some(entry) = entry else { continue };
            if entry.kind == FlatKind::Dir {
                self.open[side].push(OpenDir {
                    path: entry.path,
                    holds_file: false,
                    deferred,
                });
            } else if let Some(parent) = self.open[side].last_mut() {
                parent.holds_file = true;
            }
        }
    }

    /// Closes the directories of `side` that `path` is not inside ("": all of them).
    fn close_until(&mut self, side: usize, path: &str) {
        while let Some(top) = self.open[side].last() {
            let inside = path.len() > top.path.len()
                && path.starts_with(top.path.as_str())
                && path.as_bytes()[top.path.len()] == b'/';
            if inside {
                break;
            }
            let closed = self.open[side].pop().expect("the loop saw a top");
            if closed.holds_file
                && let Some(parent) = self.open[side].last_mut()
            {
                parent.holds_file = true;
            }
            if let Some(index) = closed.deferred {
                self.deferred[index].holds_file[side] = closed.holds_file;
            }
        }
    }

    /// The changes, sorted by path; `resolve(n)` gives the id of the file given with
    /// `pending` number `n`.
    pub fn finish(mut self, resolve: impl Fn(usize) -> ObjectId) -> Vec<Change> {
        self.close_until(0, "");
        self.close_until(1, "");
        for deferred in self.deferred {
            let leaf = |entry: Option<FlatEntry>, holds_file: bool| {
                entry.filter(|e| !(e.kind == FlatKind::Dir && holds_file))
            };
            let old = leaf(deferred.old, deferred.holds_file[0]);
            let mut new = leaf(deferred.new, deferred.holds_file[1]);
            if let (Some(n), Some(entry)) = (deferred.pending, new.as_mut()) {
                entry.id = resolve(n);
            }
            self.changes.extend(change_between(old, new));
        }
        self.changes.sort_by(|a, b| a.path.cmp(&b.path));
        self.changes
    }
}

/// The change from leaf `old` to leaf `new` at one path ([`leaf_change`]), if any.
fn change_between(old: Option<FlatEntry>, new: Option<FlatEntry>) -> Option<Change> {
    let change = leaf_change(old.as_ref(), new.as_ref())?;
    Some(Change {
        path: old.as_ref().or(new.as_ref())?.path.clone(),
        change,
        old,
        new,
        from: None,
        to: None,
    })
}

/// Merges two listings in [`crate::names::path_order`] with a [`StreamingDiff`] (what status
/// does with a version's walk and a directory's): the same changes as [`diff_flat`].
#[cfg(test)]
pub(crate) fn diff_in_order(
    old: impl IntoIterator<Item = FlatEntry>,
    new: impl IntoIterator<Item = FlatEntry>,
) -> Vec<Change> {
    let mut diff = StreamingDiff::new();
    let mut old = old.into_iter().peekable();
    for entry in new {
        while let Some(before) = old
            .next_if(|o| crate::names::path_order(&o.path, &entry.path) == std::cmp::Ordering::Less)
        {
            diff.pair(Some(before), None, None);
        }
        let same = old.next_if(|o| o.path == entry.path);
        diff.pair(same, Some(entry), None);
    }
    for rest in old {
        diff.pair(Some(rest), None, None);
    }
    diff.finish(|_| unreachable!("nothing pending"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, kind: char, id: u8) -> FlatEntry {
        FlatEntry {
            path: path.to_string(),
            kind: match kind {
                'd' => FlatKind::Dir,
                'x' => FlatKind::File { executable: true },
                'l' => FlatKind::Symlink { target: "t".into() },
                _ => FlatKind::File { executable: false },
            },
            size: 1,
            id: ObjectId([id; 32]),
        }
    }

    /// Renames pair by content id and mode only, the same file name first, then in path
    /// order, whatever order the entries come in; empty files and directories never pair.
    #[test]
    fn renames_pair_deterministically_by_id_mode_and_name() {
        let paths = |pairs: Vec<(FlatEntry, FlatEntry)>| -> Vec<(String, String)> {
            pairs.into_iter().map(|(a, b)| (a.path, b.path)).collect()
        };
        let mut empty_old = entry("e", 'f', 9);
        empty_old.size = 0;
        let mut empty_new = entry("e2", 'f', 9);
        empty_new.size = 0;
        let deleted = vec![
            entry("a/x", 'f', 1),
            entry("a/y", 'f', 1),
            entry("b/q", 'f', 2),
            entry("tool", 'f', 3),
            entry("dir", 'd', 4),
            empty_old,
        ];
        let added = vec![
            entry("c/z", 'f', 1),
            entry("c/x", 'f', 1),
            entry("c/q", 'x', 2),
            entry("bin/tool", 'f', 3),
            entry("dir2", 'd', 4),
            empty_new,
        ];
        let expected = vec![
            ("tool".to_string(), "bin/tool".to_string()),
            ("a/x".to_string(), "c/x".to_string()),
            ("a/y".to_string(), "c/z".to_string()),
        ];
        assert_eq!(
            paths(pair_renames(deleted.clone(), added.clone())),
            expected
        );
        let (mut deleted, mut added) = (deleted, added);
        deleted.reverse();
        added.reverse();
        assert_eq!(paths(pair_renames(deleted, added)), expected);
    }

    /// The whole-listing diff `diff_flat` was before it streamed (maps of the directories that
    /// hold a file, then one merge): the reference the streaming diff is checked against.
    fn whole_listing_diff(old: &[FlatEntry], new: &[FlatEntry]) -> Vec<Change> {
        use crate::names::path_order;
        use std::cmp::Ordering;
        fn in_order(entries: &[FlatEntry]) -> Vec<&FlatEntry> {
            let mut sorted: Vec<&FlatEntry> = entries.iter().collect();
            if !sorted.is_sorted_by(|a, b| path_order(&a.path, &b.path) != Ordering::Greater) {
                sorted.sort_by(|a, b| path_order(&a.path, &b.path));
            }
            sorted
        }
        fn non_empty_dirs(entries: &[FlatEntry]) -> std::collections::HashSet<&str> {
            let mut dirs = std::collections::HashSet::new();
            for entry in entries.iter().filter(|e| e.kind != FlatKind::Dir) {
                let mut path = entry.path.as_str();
                while let Some((parent, _)) = path.rsplit_once('/') {
                    if !dirs.insert(parent) {
                        break;
                    }
                    path = parent;
                }
            }
            dirs
        }
        let (old_full, new_full) = (non_empty_dirs(old), non_empty_dirs(new));
        let (old, new) = (in_order(old), in_order(new));
        let leaf = |full: &std::collections::HashSet<&str>, entry: Option<&&FlatEntry>| {
            entry
                .filter(|e| !(e.kind == FlatKind::Dir && full.contains(e.path.as_str())))
                .map(|e| (*e).clone())
        };
        let (mut i, mut j) = (0, 0);
        let mut changes = Vec::new();
        while i < old.len() || j < new.len() {
            let order = match (old.get(i), new.get(j)) {
                (Some(a), Some(b)) => path_order(&a.path, &b.path),
                (Some(_), None) => Ordering::Less,
                _ => Ordering::Greater,
            };
            let (a, b) = match order {
                Ordering::Less => (old.get(i), None),
                Ordering::Greater => (None, new.get(j)),
                Ordering::Equal => (old.get(i), new.get(j)),
            };
            i += usize::from(a.is_some());
            j += usize::from(b.is_some());
            let is_dir = |e: Option<&&FlatEntry>| e.is_some_and(|e| e.kind == FlatKind::Dir);
            if is_dir(a) && is_dir(b) {
                continue;
            }
            let (old_leaf, new_leaf) = (leaf(&old_full, a), leaf(&new_full, b));
            changes.extend(change_between(old_leaf, new_leaf));
        }
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        changes
    }

    /// Every listing of up to a few paths over a small alphabet of names, with every kind:
    /// the streaming diff (and `diff_flat`, which uses it) agrees with the whole-listing one
    /// on all pairs.
    #[test]
    fn the_streaming_diff_agrees_with_diff_flat() {
        // Paths chosen so that path order and byte order differ ("a/b" before "a.c").
        let paths = ["a", "a/b", "a/b/c", "a.c", "b", "b/a"];
        let mut seed = 7u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let listing = |next: &mut dyn FnMut() -> u64| {
            let mut out: Vec<FlatEntry> = Vec::new();
            for path in paths {
                // A path is listed only under a listed directory.
                let parent_ok = match path.rsplit_once('/') {
                    None => true,
                    Some((parent, _)) => out
                        .iter()
                        .any(|e| e.path == parent && e.kind == FlatKind::Dir),
                };
                let roll = next() % 6;
                if parent_ok && roll > 0 {
                    let kind = ['d', 'd', 'f', 'x', 'l'][(roll - 1) as usize];
                    out.push(entry(path, kind, (next() % 2) as u8));
                }
            }
            out
        };
        for _ in 0..4000 {
            let old = listing(&mut next);
            let new = listing(&mut next);
            let mut old_sorted = old.clone();
            old_sorted.sort_by(|a, b| crate::names::path_order(&a.path, &b.path));
            let mut new_sorted = new.clone();
            new_sorted.sort_by(|a, b| crate::names::path_order(&a.path, &b.path));
            let reference = whole_listing_diff(&old, &new);
            assert_eq!(
                diff_in_order(old_sorted, new_sorted),
                reference,
                "old {old:?}\nnew {new:?}"
            );
            assert_eq!(diff_flat(&old, &new), reference, "old {old:?}\nnew {new:?}");
        }
    }

    #[test]
    fn a_pending_file_gets_its_id_at_the_end() {
        let mut diff = StreamingDiff::new();
        diff.pair(Some(entry("a", 'f', 1)), Some(entry("a", 'f', 0)), Some(0));
        diff.pair(Some(entry("b", 'f', 1)), Some(entry("b", 'f', 0)), Some(1));
        let changes = diff.finish(|n| ObjectId([n as u8 + 1; 32]));
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].path, "b");
        assert_eq!(changes[0].new.as_ref().unwrap().id, ObjectId([2; 32]));
    }
}
