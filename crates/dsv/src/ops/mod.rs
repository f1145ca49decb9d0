//! Operations: the use cases, each composing the stages (walk, chunk, pack, catalog).
//! Each takes the [`crate::Store`], an options struct and a [`crate::progress::Progress`],
//! and returns a serializable report; none prints.
//!
//! # Modules by concern
//!
//! - Versions in and out: [`commit`], [`import`], [`checkout`], [`status`], [`ingest`] (the
//!   packing stage commit and import share), [`rebase`].
//! - Reading without a checkout, over [`crate::read`]: [`cat`], [`export`].
//! - Queries: [`inspect`] (log, show, ls, diff). Names: [`refs`] (tag, reset, rename).
//! - Keeping and freeing: [`retention`] (rm, pin, unpin), [`gc`], [`cache`] (eviction),
//!   [`workspace`] (the workspaces that hold versions).
//! - Remotes: [`sync`] (fetch, push, pull, clone, and what they share).
//! - Trust: [`audit`], [`lock_file`], [`lineage`], [`verify`], [`repair`].
//!
//! # Threads inside one process
//!
//! - **Walk** (`walk.rs`). One thread (`dsv-walk`) lists names with the `ignore` crate's
//!   sequential walker; `parallel::map` then lstats each batch on one thread per CPU.
//! - **Ingest** (`ops/ingest.rs`). `jobs` compressor threads and `jobs` reader threads (no
//!   more readers than files), all scoped to the call. The default `jobs` is the number of
//!   CPUs.
//!   - Readers take files from a shared atomic counter. Each reader opens its **own catalog
//!     connection** (`Catalog::open`). The connection is opened with read-write flags but
//!     used only for `has_object` lookups. The main connection is never shared between
//!     threads. Each reader fills its own `FrameBuilder`.
//!   - Full frames go through a bounded queue (`mpsc::sync_channel`, capacity 2 × `jobs`
//!     frames) to the compressors. A single large file therefore still compresses on every
//!     core, and memory stays bounded at roughly 4 × `jobs` frames of about 1 MiB. Each
//!     compressor keeps one zstd context for all its frames.
//!   - Two mutexes in `PackSink` are shared. `written` is the set of (id, kind) pairs
//!     claimed in this run, so two readers never store the same object. `state` holds the
//!     open `PackWriter` and the list of sealed packs. Appending a frame, and sealing a full
//!     pack (including its fsync), happen while holding `state`.
//!   - On the first error in any thread, a shared `failed` flag is set and the file counter
//!     moves to the end. Readers stop after their current file. Compressors keep draining
//!     the queue, discarding frames, so no reader blocks on a full queue.
//! - **Hashing** in status and checkout (`hash_files`) uses `parallel::map` over the
//!   files to hash, on `jobs` threads (status: default the number of CPUs; checkout: its own
//!   `jobs`, below).
//! - **Checkout writers** (staging, step 9). `parallel::map` runs the write tasks in two
//!   phases. Bulk tasks (the segments of large files first, then batches whose files average
//!   at least 256 KiB) run on `min(jobs, CPUs)` threads: more writers would only contend in
//!   the kernel's page cache. Then the other batches run on `jobs` threads (default:
//!   3 × CPUs, at most 12), since creating many files is bound by per-file kernel work that
//!   overlaps. Batches hold up to 32 files or 2 MiB, in pack order. Each thread keeps a
//!   **thread-local `PackReader`** with its own open pack files and an LRU cache of 3
//!   decompressed frames. A `PackReader` reuses its buffers (a new frame is decompressed into
//!   the buffer of the frame it evicts) and one zstd decompression context, and hands each
//!   object's bytes to the writer without copying them (`PackReader::with_object`). Chunk
//!   locations are found before the threads start, so the writers never touch the catalog.
//!   The segments of one large file are counted down with an atomic counter, so exactly one
//!   thread verifies it. Renames happen afterwards, on the calling thread (checkout step 10).
//! - **Ctrl-C.** The first Ctrl-C sets a flag (`interrupt.rs`). Loops check it between entries
//!   (the walk's lstat pass), between files (ingest, hashing, checkout staging), between
//!   chunks (checkout segments of large files), between packs and versions (verify), and
//!   between objects (`gc`'s repack, which then abandons its new packs), and
//!   stop with `Error::Interrupted` (exit 130). Ingest and hashing do not interrupt a file
//!   part-way, and waiting for a lock does not check the flag. Checkout checks only until
//!   staging ends: interrupted then, it removes its temporaries and leaves the directory as
//!   it was; once it applies, it runs to the end. A second Ctrl-C exits the process at once
//!   with code 130 (`cli/mod.rs`). What that leaves is the same as a `kill -9` at that point
//!   (below).
//!
//! # Crash safety
//!
//! The rule: a pack is written in full, made read-only, fsynced, renamed to its final name, and
//! its directory fsynced, *before* the single catalog transaction that names it. The catalog
//! therefore never names a pack that is not durably on disk. Nothing else is written to
//! `packs/`. Packs made from frames downloaded from a remote, and `gc`'s repacked packs, follow
//! the same rule; what an interrupted push, fetch or pull leaves is in [Retries and
//! resumption](#retries-and-resumption). The converse holds for deletion: `gc` deletes a pack
//! file only after a committed transaction has stopped naming it, and never a file the catalog
//! names at that moment (gc (`ops::gc`)).
//!
//! What a `kill -9` leaves, by stage:
//!
//! | operation | killed during | left behind | next run / `verify` |
//! | --- | --- | --- | --- |
//! | commit | walk, ingest, tree writing, before any pack is sealed | `.dsv/tmp/pack-<pid>-*.tmp` (partial pack) | catalog unchanged; a re-run does all the work again. `verify` lists the file under `temporary_files` and still reports the store consistent. The next commit removes it, since process `<pid>` is gone. |
//! | commit | after some packs are sealed, before the transaction commits | whole packs in `.dsv/packs/` that the catalog does not name, plus possibly a `tmp/` file | catalog unchanged. `verify` lists them under `unreferenced_packs` (and `temporary_files`) and still reports the store consistent. A re-run does not reuse their contents (the catalog does not know them) and writes new packs. The `tmp/` file goes as above; the packs stay. |
//! | commit | inside the transaction | — | SQLite rolls the transaction back on the next open: all of the version's rows or none. |
//! | commit | after the transaction | — | done. |
//! | import, update | any stage | as for commit at the same stage: a `tmp/` file, and packs sealed before the kill stay unreferenced (only an error, a Ctrl-C or a SIGTERM deletes them, `PackSink::abandon`); the copy of a downloaded zip has no name and is gone | as for commit. |
//! | checkout | planning (steps 1–7) | at most the created (empty) directory and the workspace lock file | re-run. |
//! | checkout | staging (steps 8–9) | `.dsv-tmp-<pid>-<n>` files beside their destinations or at the top of the directory; nothing else changed (leftovers of dead processes may be gone) | the catalog still says the workspace holds the old version. The next checkout of the directory removes the `.dsv-tmp-<pid>-<n>` files (their process is gone), including those inside a directory the target replaces with a file. Commit and status skip `.dsv-tmp-<pid>-<n>` files but do not remove them. |
//! | checkout | applying (step 10) | some deletions done, some files and staged subtrees renamed into place, the rest still staged as `.dsv-tmp-<pid>-<n>` files or directories | the catalog still says the workspace holds the old version. A re-run of the same checkout keeps the files already written (they equal the target), removes the `.dsv-tmp-<pid>-<n>` files and directories, and writes the rest. Checking out a *different* version, or the old one again, reports no conflict for the files already replaced, since their content is in the store (they are recoverable); files the crashed checkout added that the new target lacks are left as untracked files. |
//! | checkout | after applying, before the transaction | all files in place | a re-run hashes them, finds everything up to date, and records the workspace. |
//! | status, tag, rm, pin, unpin | any time | — | at most the transaction is rolled back. |
//! | any transaction that changes names (commit, import, tag, rm, pin, unpin, remote, pull, clone) | after its ref log append, before the catalog commits | ref log lines past the length the catalog recorded | the catalog is unchanged; `verify` reads the log only up to the recorded length and reports nothing. The next change moves the lines to `reflog.unapplied`. `dsv repair`, which reads the whole log, would replay them (their versions' packs are durable). |
//! | gc | planning, copying, swapping, deleting | see the table in gc (`ops::gc`) | consistent at every point; unnamed packs go at the next `gc` past the grace period. |
//! | cache prune | listing, or its marking transaction | — | nothing marked, or every mark of the run. |
//! | cache prune | its `gc` | as for `gc` | the versions stay marked; the next `gc` (or prune) frees their data. |
//!
//! An error or a single Ctrl-C (as opposed to `kill -9`) leaves the catalog unchanged the same
//! way. A `PackWriter` that is dropped before it is sealed deletes its temporary file, so an
//! interrupted or failed ingest leaves nothing in `.dsv/tmp/`. A commit or import that fails
//! deletes the packs it sealed (those the catalog does not name), except when it fails while
//! sealing its last pack, which leaves them unreferenced (commit (`ops::commit`) step 17,
//! Safety (`ops::import`)). A checkout that fails while staging removes all its temporary files
//! and leaves the directory as it was; one that fails while applying leaves its remaining
//! temporary files for the next checkout to remove.
//!
//! `synchronous=FULL` in WAL mode syncs the log at every transaction commit, so a transaction
//! that has committed (a commit or checkout that reported success) survives power loss as well
//! as a process kill.

pub mod audit;
pub mod cache;
pub mod cat;
pub mod checkout;
pub mod commit;
pub mod compose;
pub(crate) mod delta_check;
pub(crate) mod disk;
pub mod export;
pub mod following;
pub mod gc;
pub(crate) mod history;
pub mod import;
pub mod ingest;
pub mod inspect;
pub mod lineage;
pub mod lock_file;
pub mod rebase;
pub mod refs;
pub mod repair;
pub mod retention;
pub mod status;
pub mod sync;
pub mod verify;
pub mod workspace;
