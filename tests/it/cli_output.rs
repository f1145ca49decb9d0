//! The human output of each command, snapshotted (paths, ids and times normalized), and
//! `--help`.

use insta::assert_snapshot;

use crate::common::{TestEnv, settle};

fn human(env: &TestEnv, args: &[&str]) -> String {
    let out = env.run(args);
    let text = format!(
        "exit: {}\n--- stdout\n{}--- stderr\n{}",
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    env.normalize(&text)
}

#[test]
fn a_session_in_text() {
    let env = TestEnv::bare();
    assert_snapshot!(human(&env, &["init"]), @"
    exit: 0
    --- stdout
    Initialized an empty dsv store in [ROOT]/.dsv
    --- stderr
    ");
    env.write("data/a.txt", "alpha\n");
    env.write("data/sub/b.txt", "beta\n");
    settle(&env);
    assert_snapshot!(human(&env, &["commit", "data", "--dataset", "demo", "-m", "first import", "--tag", "v1"]), @"
    exit: 0
    --- stdout
    Committed demo@[SHORT] (tag v1): 2 files, 11 B
      read 2 files (11 B), 0 unchanged; stored 2 new chunks, 11 B in 1 pack
    [ID]
    --- stderr
    note: new dataset demo
    ");
    assert_snapshot!(human(&env, &["commit", "data", "--dataset", "demo"]), @"
    exit: 0
    --- stdout
    Nothing changed: demo is still at [SHORT]
    --- stderr
    ");
    env.write("data/a.txt", "alpha, edited\n");
    env.write("data/c.txt", "new\n");
    assert_snapshot!(human(&env, &["status", "data"]), @"
    exit: 0
    --- stdout
    [ROOT]/data differs from demo@[SHORT]:
    M a.txt
    A c.txt
    --- stderr
    ");
    assert_snapshot!(human(&env, &["commit", "data", "--dataset", "demo", "-m", "edit a\n\nand add c"]), @"
    exit: 0
    --- stdout
    Committed demo@[SHORT]: 3 files, 23 B
      read 2 files (18 B), 1 unchanged; stored 2 new chunks, 18 B in 1 pack
    [ID]
    --- stderr
    ");
    assert_snapshot!(human(&env, &["diff", "demo@v1", "demo"]), @"
    exit: 0
    --- stdout
    M a.txt
    A c.txt
    --- stderr
    ");
    assert_snapshot!(human(&env, &["log", "demo"]), @"
    exit: 0
    --- stdout
    version [ID]
    Author: tester
    Date:   [TIME]
    Files:  3 files, 23 B

        edit a
        
        and add c

    version [ID] (tags: v1)
    Author: tester
    Date:   [TIME]
    Files:  2 files, 11 B

        first import
    --- stderr
    ");
    assert_snapshot!(human(&env, &["ls"]), @"
    exit: 0
    --- stdout
    DATASET  VERSIONS  FILES  SIZE  HEAD
    demo            2      3  23 B  [SHORT]
    --- stderr
    ");
    assert_snapshot!(human(&env, &["ls", "demo"]), @"
    exit: 0
    --- stdout
    -  14 B  a.txt
    -   4 B  c.txt
    d   5 B  sub/
    -   5 B  sub/b.txt
    --- stderr
    ");
    assert_snapshot!(human(&env, &["checkout", "demo@v1", "work"]), @"
    exit: 0
    --- stdout
    Checked out demo@[SHORT] into [ROOT]/work: 2 files, 11 B
      wrote 2 (11 B), deleted 0, 0 already up to date
    --- stderr
    ");
    assert_snapshot!(human(&env, &["status", "work"]), @"
    exit: 0
    --- stdout
    Clean: [ROOT]/work matches demo@[SHORT]
    behind demo by 1 version (`dsv checkout demo [ROOT]/work` brings it here)
    --- stderr
    ");
    assert_snapshot!(human(&env, &["show", "demo@v1"]), @"
    exit: 0
    --- stdout
    version  [ID]
    dataset  demo
    parent   (none)
    tags     v1
    tree     [ID]
    files    2
    bytes    11 (11 B)
    author   tester
    date     [TIME]
    source   [ROOT]/data
    message  first import
    --- stderr
    ");
    assert_snapshot!(human(&env, &["tag", "demo", "v2"]), @"
    exit: 0
    --- stdout
    Tagged demo@[SHORT] as v2
    --- stderr
    ");
    assert_snapshot!(human(&env, &["verify"]), @"
    exit: 0
    --- stdout
    Checked 2 packs ([SIZE]), 9 objects, 2 versions
    The store is consistent.
    --- stderr
    ");
}

#[test]
fn errors_in_text() {
    let env = TestEnv::new();
    env.write("data/a.txt", "alpha\n");
    env.ok(&["commit", "data", "--dataset", "demo"]);
    assert_snapshot!(human(&env, &["checkout", "demo@v7", "out"]), @r#"
    exit: 3
    --- stdout
    --- stderr
    error: unknown revision "demo@v7"

    hint: `dsv log demo` lists its versions and tags
    "#);
    assert_snapshot!(human(&env, &["commit", "data", "--dataset", "no good"]), @r#"
    exit: 3
    --- stdout
    --- stderr
    error: invalid dataset name "no good": use only letters, digits, '.', '_' and '-'
    "#);
    env.ok(&["checkout", "demo", "work"]);
    env.write("work/a.txt", "mine\n");
    env.write("data/a.txt", "theirs\n");
    env.ok(&["commit", "data", "--dataset", "demo"]);
    assert_snapshot!(human(&env, &["checkout", "demo", "work"]), @"
    exit: 4
    --- stdout
    --- stderr
    error: checkout would overwrite 1 uncommitted change(s) in [ROOT]/work: a.txt

    hint: commit those changes first, or pass --force to overwrite them (they will be lost)
    ");
    let bare = TestEnv::bare();
    assert_snapshot!(human(&bare, &["log", "demo"]), @"
    exit: 3
    --- stdout
    --- stderr
    error: no dsv store found in [ROOT] or any parent directory

    hint: run `dsv init` to create a store here, or pass --store PATH / set DSV_STORE
    ");
}

#[test]
fn help_lists_every_command() {
    let env = TestEnv::bare();
    assert_snapshot!(human(&env, &["--help"]), @"
    exit: 0
    --- stdout
    A content-addressed dataset versioning store: git commit / git checkout for ML datasets

    Usage: dsv [OPTIONS] <COMMAND>

    Commands:
      init         Create a store (`.dsv/`) in DIR (default: the current directory).
      commit       Snapshot a directory as a new version of a dataset; prints the version id.
      checkout     Materialize a version into DIR (created if missing), writing only what differs.
      import       Import a version from object storage, a URL or a local path: one object (an archive
                   is expanded), or every object under a prefix. Each file's source, ETag, VersionId,
                   Last-Modified and size are recorded (`dsv show REV --provenance`).
      update       Re-check the source an imported dataset came from: download only the objects that
                   changed, and record a new version only if something did.
      status       Show what changed in a workspace since the version it holds (default: the workspace
                   holding the current directory).
      diff         Show what changed between two versions (or a version and its parent).
      log          List a dataset's versions: the head and its ancestors, newest first, then versions
                   on other lines (left by `dsv reset`, or fetched from a remote).
      ls           List datasets, or the files of a version (`REV` or `REV:PATH`).
      show         Show one version: id, parent, tags, counts, bytes, source.
      tag          Give a version a name (a tag), list the tags, or delete one.
      reset        Move a dataset's local head to another of its versions (as `git reset` moves a
                   branch): nothing is deleted, and the line the head leaves stays in `dsv log`.
      rename       Rename a dataset: its versions, head, tags and workspaces follow.
      export       Write a version (or a shard or subset of it) as a tar stream: to stdout, a file or a
                   FIFO (SageMaker's Pipe mode).
      mount        Mount a version (or a shard or subset of it) as a read-only file system (FUSE), in
                   the foreground, until Ctrl-C, SIGTERM or `fusermount3 -u MOUNTPOINT`.
      shards       Print which files each of N shards holds (`--shard I/N` on export): deterministic,
                   balanced by bytes, the same on every machine.
      cat          Write one file of a version to stdout.
      repair       Rebuild a lost or damaged catalog from the packs and the ref log.
      verify       Check every pack, object, tree and version of the store; report, never fix.
      audit        Check that DIR is bit-identical to a version (by default the one it was last
                   committed or checked out as), or prove a training run's lineage record; exit 0 only
                   when it is (proven), 1 when it differs.
      lock         Pin exact versions in a lock file, written as JSON to stdout.
      cache        The local cache of versions: what each costs here, and bounded eviction.
      workspace    The directories this store committed from or checked out into (workspaces); each
                   holds its version from `rm` and cleanup until it is deleted or forgotten.
      gc           Delete what no remaining version reaches (after `rm`), repacking packs that are
                   mostly garbage; `--dry-run` prints the plan only.
      rm           Remove a version's data (NAME@REV) or a whole dataset's (NAME); the log keeps the
                   versions, marked removed; `gc` frees the space. A dataset whose versions are all
                   removed is no longer listed by `dsv ls`.
      pin          Keep a version from removal (a job's lease: `--until`).
      unpin        Lift a pin.
      pins         List the pins.
      remote       Manage remotes: object storage (s3://, gs://, az://, file://) holding packs and refs.
      push         Upload what a remote lacks for each dataset's head (or NAME[@REV]), then move the
                   remote's heads (fast-forward only) and create its tags.
      copy         Copy versions from one remote to another, with no local copy of their data.
      pull         Download a dataset's version (default: the remote's head) and what it needs; move the
                   local head to it when that is a fast-forward.
      rebase       Replay a dataset's local versions onto ONTO (a remote's head, or any version).
      fetch        Refresh a remote's refs and metadata (versions, trees; no file data).
      clone        Create a store from a remote: its datasets, heads and tags; data is fetched when
                   first needed (by checkout or pull).
      completions  Print a shell completion script to stdout.
      man          Write man pages into DIR (created if missing): dsv.1, and dsv-COMMAND.1 for every
                   command and subcommand (dsv-commit.1, dsv-cache-ls.1, ...).
      config       Read and change the store's settings (`.dsv/config.toml`): defaults for flags.
      help         Print this message or the help of the given subcommand(s)

    Options:
      -h, --help     Print help
      -V, --version  Print version

    Global options:
          --store <PATH>  The store to use (a `.dsv` directory or the directory holding one); default:
                          the nearest `.dsv` in the current directory or its parents [env: DSV_STORE=]
          --json          Print machine-readable JSON on stdout instead of text
      -q, --quiet         Print nothing but errors
          --no-progress   Never draw progress bars (they are only drawn on a terminal anyway)
    --- stderr
    ");
    assert_snapshot!(human(&env, &["checkout", "--help"]), @"
    exit: 0
    --- stdout
    Materialize a version into DIR (created if missing), writing only what differs.

    With --shard, --include or --files-from, a partial checkout: only the selected files
    (and the directories on their paths) are fetched and written, into a directory that
    is not a workspace; no workspace is recorded.

    Examples:
      dsv checkout mnist@v3 /scratch/mnist
      dsv checkout origin/mnist@v3 /scratch/mnist     # from a remote, fetching what is missing
      dsv checkout mnist@v3 /scratch/part --shard 2/8 # worker 2 of 8's files only
      dsv checkout mnist@v3 /scratch/train --include 'train/**'

    Usage: dsv checkout [OPTIONS] [REVISION] [DIR]

    Arguments:
      [REVISION]
              The revision: NAME (its latest version), NAME@TAG, NAME@latest (or NAME@HEAD), NAME@<id
              prefix, 4+ hex digits>, or any of these followed by ~N or ^ (N versions back, one back:
              NAME@v2~1, NAME@HEAD^); or REMOTE/REV, REV as remote REMOTE names it (origin/mnist@v3),
              fetching what is missing. With --lock, give only DIR

      [DIR]
              Where to materialize it (with --lock: each dataset into DIR/NAME)

    Options:
          --lock <FILE>
              Materialize exactly the versions this lock file pins (see `dsv lock`), or fail

          --force
              Overwrite or delete changes that were never committed

          --dry-run
              Print what the checkout would do (each path written, replaced, deleted, carried over or in
              conflict) and change nothing: no directory made, nothing fetched, no workspace recorded.
              Exits 4 when the checkout would be refused for conflicts

          --shard <I/N>
              Only worker I of N's shard (I counts from 0): deterministic, balanced by bytes

          --include <GLOB>
              Only files matching GLOB (repeatable), e.g. 'train/**'

          --files-from <LIST>
              Only the files listed in LIST, one path per line (a manifest); an unknown path is an error
              naming it

      -j, --jobs <N>
              Parallel workers or requests in flight, 1 to 256 (default: a sensible number for this
              machine)

      -h, --help
              Print help (see a summary with '-h')

      -V, --version
              Print version

    Global options:
          --store <PATH>
              The store to use (a `.dsv` directory or the directory holding one); default: the nearest
              `.dsv` in the current directory or its parents
              
              [env: DSV_STORE=]

          --json
              Print machine-readable JSON on stdout instead of text

      -q, --quiet
              Print nothing but errors

          --no-progress
              Never draw progress bars (they are only drawn on a terminal anyway)
    --- stderr
    ");
}

#[test]
fn a_remote_session_in_text() {
    let env = TestEnv::new();
    env.write("data/a.txt", "alpha\n");
    env.ok(&["commit", "data", "-d", "demo", "-t", "v1"]);
    let url = format!(
        "file://{}/remote",
        std::fs::canonicalize(env.root()).unwrap().display()
    );
    env.ok(&["remote", "add", "origin", &url]);
    insta::with_settings!({ filters => vec![(r"\d+(\.\d+)? (B|KiB|MiB)", "[SIZE]"), (r"\d+ requests?\b", "[N] requests")] }, {
        assert_snapshot!(human(&env, &["push"]), @"
        exit: 0
        --- stdout
        origin/demo     [SHORT]  created
        origin/demo@v1  [SHORT]  created
        uploaded [SIZE] in 1 pack, [N] requests
        --- stderr
        ");
        assert_snapshot!(human(&env, &["push"]), @"
        exit: 0
        --- stdout
        origin/demo     [SHORT]..[SHORT]  up-to-date
        origin/demo@v1  [SHORT]                up-to-date
        uploaded [SIZE] in 0 packs, [N] requests
        --- stderr
        ");
        assert_snapshot!(human(&env, &["remote", "ls"]), @"
        exit: 0
        --- stdout
        origin            file://[ROOT]/remote
          origin/demo     [SHORT]
          origin/demo@v1  [SHORT]
        --- stderr
        ");
        assert_snapshot!(human(&env, &["clone", &url, "copy"]), @"
        exit: 0
        --- stdout
        Cloned file://[ROOT]/remote into [ROOT]/copy
          demo  [SHORT]
        downloaded metadata: [SIZE] in 1 pack, [N] requests
        --- stderr
        ");
        assert_snapshot!(human(&env, &["--store", "copy", "checkout", "origin/demo", "out"]), @"
        exit: 0
        --- stdout
        origin/demo@[SHORT]: ref unchanged on the remote (cache hit); downloaded [SIZE] in 1 pack, [N] requests
        Checked out demo@[SHORT] into [ROOT]/out: 1 file, [SIZE]
          wrote 1 ([SIZE]), deleted 0, 0 already up to date
        --- stderr
        ");
        assert_snapshot!(human(&env, &["--store", "copy", "pull", "demo"]), @"
        exit: 0
        --- stdout
        origin/demo@[SHORT]: ref unchanged on the remote (cache hit); downloaded [SIZE] in 0 packs, [N] requests
        demo is already at [SHORT]
        --- stderr
        ");
        assert_snapshot!(human(&env, &["--store", "copy", "fetch"]), @"
        exit: 0
        --- stdout
        origin/demo     [SHORT]
        origin/demo@v1  [SHORT]
        2 refs (0 changed), 0 new packs; downloaded [SIZE] in 0 packs, [N] requests
        --- stderr
        ");
        assert_snapshot!(human(&env, &["remote", "add", "origin", &url]), @r#"
        exit: 3
        --- stdout
        --- stderr
        error: a remote named "origin" already exists
        "#);
        assert_snapshot!(human(&env, &["remote", "add", "x", "s3://b/p", "--option", "aws_secret_access_key=k"]), @r#"
        exit: 3
        --- stdout
        --- stderr
        error: invalid remote option "aws_secret_access_key": credentials are never stored in the store; set them in the environment (AWS_*, AZURE_*, GOOGLE_*) or a profile
        "#);
    });
}

#[test]
fn an_audit_in_text() {
    let env = TestEnv::new();
    env.write("data/a.txt", "alpha\n");
    env.write("data/b.txt", "beta\n");
    env.ok(&["commit", "data", "-d", "demo"]);
    env.ok(&["checkout", "demo", "out"]);
    settle(&env);
    insta::with_settings!({ filters => vec![(r"\d+\.\d\d s", "[SECONDS]"), (r"dsv \d+\.\d+\.\d+", "dsv [VERSION]")] }, {
        assert_snapshot!(human(&env, &["audit", "out"]), @"
        exit: 0
        --- stdout
        [ROOT]/out is identical to demo@[SHORT] (2 files, 11 B)
          version [ID] (workspace); 0 files hashed, the rest vouched for by the stat cache; dsv [VERSION] at [TIME], [SECONDS]
        --- stderr
        ");
        env.write("out/a.txt", "alpha, edited\n");
        std::fs::remove_file(env.path("out/b.txt")).unwrap();
        assert_snapshot!(human(&env, &["audit", "out", "--full"]), @"
        exit: 1
        --- stdout
        [ROOT]/out differs from demo@[SHORT]: 2 mismatches
        M a.txt  expected [SHORT] (6 B), found [SHORT] (14 B)
        D b.txt  expected [SHORT] (5 B), found - (-)
          version [ID] (workspace); every file re-hashed; dsv [VERSION] at [TIME], [SECONDS]
        --- stderr
        ");
    });
}

#[test]
fn an_import_in_text() {
    let env = TestEnv::new();
    let mut builder = tar::Builder::new(Vec::new());
    for (name, body) in [
        ("mnist/train/0.txt", "zero\n"),
        ("mnist/test/1.txt", "one\n"),
    ] {
        let mut header = tar::Header::new_gnu();
        header.set_size(body.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(1_700_000_000);
        header.set_cksum();
        builder
            .append_data(&mut header, name, body.as_bytes())
            .unwrap();
    }
    env.write("mnist.tar", builder.into_inner().unwrap());
    insta::with_settings!({ filters => vec![(r#""[0-9a-f]+-[0-9a-f]+-[0-7]+""#, "[ETAG]")] }, {
        assert_snapshot!(human(&env, &["import", "mnist.tar", "-t", "v1"]), @"
        exit: 0
        --- stdout
        Imported mnist@[SHORT] (tag v1): 2 files, 9 B
          source [ROOT]/mnist.tar: 1 object, 1 read (3.00 KiB), expanded from tar, 0 unchanged; stored 2 new chunks, 9 B in 1 pack
        [ID]
        --- stderr
        ");
        assert_snapshot!(human(&env, &["import", "mnist.tar"]), @"
        exit: 0
        --- stdout
        Nothing changed: mnist is still at [SHORT] ([ROOT]/mnist.tar unchanged at the source)
          source [ROOT]/mnist.tar: 1 object, 0 read (0 B), expanded from tar, 1 unchanged; stored 0 new chunks, 0 B in 0 packs
        --- stderr
        ");
        assert_snapshot!(human(&env, &["show", "mnist", "--provenance"]), @"
        exit: 0
        --- stdout
        version  [ID]
        dataset  mnist
        parent   (none)
        tags     v1
        tree     [ID]
        files    2
        bytes    9 (9 B)
        author   tester
        date     [TIME]
        source   [ROOT]/mnist.tar
        message  import [ROOT]/mnist.tar
        provenance
          source   [ROOT]/mnist.tar
          extract  yes
          object   file://[ROOT]/mnist.tar
                   etag [ETAG]  version -  modified [TIME]  size 3072 (3.00 KiB)
            mnist/test/1.txt
            mnist/train/0.txt
        --- stderr
        ");
        assert_snapshot!(human(&env, &["import", "mnist.tar", "--etag", "abc"]), @"
        exit: 3
        --- stdout
        --- stderr
        error: cannot import [ROOT]/mnist.tar: --etag and --version-id apply to object storage and HTTP sources
        ");
        assert_snapshot!(human(&env, &["update", "nothing"]), @r#"
        exit: 3
        --- stdout
        --- stderr
        error: unknown dataset "nothing"

        hint: `dsv ls` lists the datasets (`dsv commit DIR -d NAME` makes one)
        "#);
    });
}

/// Display columns of `text` (the test's names use only ASCII and CJK, two columns each).
fn columns(text: &str) -> usize {
    text.chars()
        .map(|c| {
            if ('\u{3040}'..='\u{9fff}').contains(&c) {
                2
            } else {
                1
            }
        })
        .sum()
}

/// Asserts that in every line of `table`, `cell(line)` starts at the display column where
/// `column` starts in the header (the first line).
fn assert_column(table: &str, column: &str, cell: impl Fn(&str) -> Option<usize>) {
    let mut lines = table.lines();
    let header = lines.next().unwrap();
    let at = columns(&header[..header.find(column).unwrap()]);
    for line in lines {
        let start = cell(line).unwrap_or_else(|| panic!("no cell in {line:?}"));
        assert_eq!(columns(&line[..start]), at, "{column} misaligned:\n{table}");
    }
}

/// Byte offset of the first match of `pattern` in a line.
fn find(pattern: &str) -> impl Fn(&str) -> Option<usize> {
    let re = regex::Regex::new(pattern).unwrap();
    move |line| re.find(line).map(|m| m.start())
}

#[test]
fn tables_align_whatever_the_name_lengths() {
    let env = TestEnv::new();
    let long = "a-dataset-name-much-longer-than-the-old-fixed-columns";
    env.write("w/x.txt", "x\n");
    env.write("工作区-with-a-long-directory-name/y.txt", "yy\n");
    env.ok(&["commit", "w", "-d", "a"]);
    env.ok(&["commit", "工作区-with-a-long-directory-name", "-d", long]);
    let ls = env.ok(&["ls"]);
    assert_column(&ls, "HEAD", find(r"[0-9a-f]{12}"));
    // SIZE is right-aligned: each size ends where the header does.
    let header_end = ls.find("SIZE").unwrap() + 4;
    let sized = regex::Regex::new(r"\d+ B").unwrap();
    for line in ls.lines().skip(1) {
        let size = sized.find(line).unwrap();
        assert_eq!(columns(&line[..size.end()]), header_end, "{ls}");
    }
    assert!(ls.lines().all(|l| !l.ends_with(' ')), "{ls:?}");

    env.ok(&["pin", "a", "--reason", "paper"]);
    env.ok(&["pin", long, "--reason", "a run", "--until", "2h"]);
    let pins = env.ok(&["pins"]);
    assert_column(&pins, "UNTIL", find(r"unpinned|\d{4}-"));
    assert_column(&pins, "REASON", find(r"paper|a run"));

    let workspaces = env.ok(&["workspace", "ls"]);
    assert_column(&workspaces, "VERSION", find(r"a@|a-dataset"));
    assert_column(&workspaces, "EXISTS", find(r"yes"));

    let cache = env.ok(&["cache", "ls"]);
    assert_column(&cache, "LAST USED", find(r"\d{4}-"));
    assert_column(&cache, "FLAGS", find(r"pinned"));

    let url = format!(
        "file://{}/remote",
        std::fs::canonicalize(env.root()).unwrap().display()
    );
    env.ok(&["remote", "add", "o", &url]);
    env.ok(&[
        "remote",
        "add",
        "a-remote-with-a-long-name",
        &format!("{url}2"),
    ]);
    env.ok(&["push", "--remote", "o"]);
    let remotes = env.ok(&["remote", "ls"]);
    let mut lines: Vec<&str> = remotes.lines().collect();
    lines.insert(0, "NAME                              URL");
    let at = lines[1].find("file://").unwrap();
    for line in &lines[1..] {
        assert_eq!(find(r"file://|[0-9a-f]{12}")(line), Some(at), "{remotes}");
    }
}

#[test]
fn config_in_text() {
    let env = TestEnv::new();
    env.ok(&["remote", "add", "backup", "file:///nonexistent/backup"]);
    assert_snapshot!(human(&env, &["config", "set", "core.compression_level", "9"]), @"
    exit: 0
    --- stdout
    core.compression_level = 9
    --- stderr
    ");
    assert_snapshot!(human(&env, &["config", "set", "remote.default", "backup"]), @"
    exit: 0
    --- stdout
    remote.default = backup
    --- stderr
    ");
    assert_snapshot!(human(&env, &["config", "list"]), @"
    exit: 0
    --- stdout
    core.compression_level = 9
    remote.default = backup
    --- stderr
    ");
    assert_snapshot!(human(&env, &["config", "get", "remote.default"]), @"
    exit: 0
    --- stdout
    backup
    --- stderr
    ");
    assert_snapshot!(human(&env, &["config", "get", "core.jobs"]), @"
    exit: 1
    --- stdout
    --- stderr
    ");
    assert_snapshot!(human(&env, &["config", "unset", "core.compression_level"]), @"
    exit: 0
    --- stdout
    Unset core.compression_level
    --- stderr
    ");
    assert_snapshot!(human(&env, &["config", "unset", "core.compression_level"]), @"
    exit: 0
    --- stdout
    core.compression_level was not set
    --- stderr
    ");
    assert_snapshot!(human(&env, &["config", "set", "core.jobs", "999"]), @r#"
    exit: 3
    --- stdout
    --- stderr
    error: invalid value "999" for core.jobs: expected a number from 1 to 256

    hint: `dsv config --help` lists the settings and the values they take
    "#);
    assert_snapshot!(human(&env, &["config", "get", "core.job"]), @r#"
    exit: 3
    --- stdout
    --- stderr
    error: unknown setting "core.job"; the settings are core.compression_level, core.jobs, core.deltas, remote.default

    hint: `dsv config --help` lists the settings and the values they take
    "#);
    env.write(
        ".dsv/config.toml",
        "[core]\njobs = 2\n[remote]\ndefault = 7\n",
    );
    assert_snapshot!(human(&env, &["config", "list"]), @"
    exit: 3
    --- stdout
    --- stderr
    error: invalid store settings in [ROOT]/.dsv/config.toml, line 4: invalid type: integer `7`, expected a string

    hint: fix or remove that line of the file (`dsv config --help` lists the settings); commands that read the settings fail until then
    ");
    assert_snapshot!(human(&env, &["config", "--help"]), @"
    exit: 0
    --- stdout
    Read and change the store's settings (`.dsv/config.toml`): defaults for flags.

    A flag on the command line wins over a setting, and a setting over the built-in
    default. The file is TOML; an unknown key or a bad value in it is an error naming
    the line.

    Settings:
      core.compression_level  zstd level of commit and import, 1-19 (built-in: 3)
      core.jobs               --jobs of commit, import, checkout, status, audit, push,
                              pull, fetch, 1-256 (built-in: per command)
      core.deltas             false: commit, import and update store every chunk whole,
                              as their --no-deltas; gc still stores older versions as
                              deltas (built-in: true)
      remote.default          the remote of push, pull and fetch without --remote
                              (built-in: the only remote, else origin)

    Examples:
      dsv config set core.compression_level 9
      dsv config set remote.default backup
      dsv config get core.jobs          # exit 1 when not set
      dsv config list --json
      dsv config unset core.jobs

    Usage: dsv config [OPTIONS] <COMMAND>

    Commands:
      list   Print the settings that are set (`KEY = VALUE`, one a line).
      get    Print one setting's value; exit 1, printing nothing, when it is not set.
      set    Set a setting (checked as the file is: a level from 1 to 19, jobs from 1 to 256,
             deltas true or false, the name of a remote of this store).
      unset  Remove a setting, so that the built-in default applies again.
      help   Print this message or the help of the given subcommand(s)

    Options:
      -h, --help
              Print help (see a summary with '-h')

      -V, --version
              Print version

    Global options:
          --store <PATH>
              The store to use (a `.dsv` directory or the directory holding one); default: the nearest
              `.dsv` in the current directory or its parents
              
              [env: DSV_STORE=]

          --json
              Print machine-readable JSON on stdout instead of text

      -q, --quiet
              Print nothing but errors

          --no-progress
              Never draw progress bars (they are only drawn on a terminal anyway)
    --- stderr
    ");
}

#[test]
fn a_checkout_that_carries_a_change_over_says_so() {
    let env = TestEnv::new();
    env.write("data/a.txt", "one\n");
    env.write("data/b.txt", "keep\n");
    env.ok(&["commit", "data", "-d", "demo", "-t", "v1"]);
    env.write("data/a.txt", "two\n");
    env.ok(&["commit", "data", "-d", "demo", "-t", "v2"]);
    env.ok(&["checkout", "demo@v1", "work"]);
    env.write("work/b.txt", "mine\n");
    assert_snapshot!(human(&env, &["checkout", "demo@v2", "work"]), @"
    exit: 0
    --- stdout
    Checked out demo@[SHORT] into [ROOT]/work: 2 files, 9 B
      wrote 1 (4 B), deleted 0, 0 already up to date
      kept 1 uncommitted change(s) that this version does not touch (`dsv status` lists them)
    --- stderr
    ");
}
