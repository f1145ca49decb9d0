//! The CLI's documentation cannot drift from its code: docs/cli.md's generated blocks equal
//! what the clap definitions render (`dsv __reference`), every command has one, links into
//! docs/cli.md resolve, every command's `--help` has examples, the shell completions and
//! man pages cover every command, and documented exit codes hold.
//!
//! To rewrite the generated blocks of docs/cli.md: `scripts/gen-docs` (or
//! `DSV_UPDATE_DOCS=1 cargo nextest run -E 'test(cli_reference)'`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::common::TestEnv;

const BEGIN: &str = "<!-- BEGIN GENERATED: ";
const END: &str = "<!-- END GENERATED -->";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The generated blocks, by command (`dsv`, `dsv commit`, `dsv cache ls`, ...), in the
/// order of clap's command tree.
fn generated_blocks() -> Vec<(String, String)> {
    let env = TestEnv::bare();
    let text = env.ok(&["__reference"]);
    let mut blocks = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix(BEGIN) {
            assert!(current.is_none(), "nested block at {line}");
            let name = rest.trim_end_matches("-->").trim().to_string();
            current = Some((name, format!("{line}\n")));
        } else if let Some((name, mut block)) = current.take() {
            block.push_str(line);
            block.push('\n');
            if line == END {
                blocks.push((name, block));
            } else {
                current = Some((name, block));
            }
        } else {
            panic!("text outside a block in `dsv __reference`: {line:?}");
        }
    }
    assert!(current.is_none(), "unterminated block");
    assert!(blocks.len() > 30, "too few commands: {}", blocks.len());
    blocks
}

/// The command names of the visible command tree (without the root `dsv`).
fn commands() -> Vec<String> {
    generated_blocks()
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| name != "dsv")
        .collect()
}

/// `doc` with each generated block replaced by `blocks`' one, and what is wrong with its
/// markers (unknown, repeated, missing, unterminated blocks).
fn splice(doc: &str, blocks: &BTreeMap<String, String>) -> (String, Vec<String>) {
    let mut out = String::new();
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    let mut lines = doc.split_inclusive('\n');
    while let Some(line) = lines.next() {
        let Some(rest) = line.strip_prefix(BEGIN) else {
            out.push_str(line);
            continue;
        };
        let name = rest.trim().trim_end_matches("-->").trim().to_string();
        let mut old = line.to_string();
        let mut terminated = false;
        for line in lines.by_ref() {
            old.push_str(line);
            if line.trim_end() == END {
                terminated = true;
                break;
            }
        }
        if !terminated {
            problems.push(format!("the block of `{name}` has no `{END}`"));
        }
        if !seen.insert(name.clone()) {
            problems.push(format!("`{name}` has two blocks"));
        }
        match blocks.get(&name) {
            Some(block) => out.push_str(block),
            None => {
                problems.push(format!(
                    "a block for `{name}`, which is no command (renamed or removed?)"
                ));
                out.push_str(&old);
            }
        }
    }
    for name in blocks.keys().filter(|name| !seen.contains(*name)) {
        problems.push(format!(
            "no block for `{name}`: add the lines `{BEGIN}{name} -->` and `{END}` to \
             docs/cli.md where it belongs, with its prose, then run scripts/gen-docs"
        ));
    }
    (out, problems)
}

/// The blocks of `doc`, by command, as written.
fn blocks_of(doc: &str) -> BTreeMap<String, String> {
    let mut blocks = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in doc.split_inclusive('\n') {
        if let Some(rest) = line.strip_prefix(BEGIN) {
            current = Some((
                rest.trim().trim_end_matches("-->").trim().into(),
                line.into(),
            ));
        } else if let Some((name, mut block)) = current.take() {
            block.push_str(line);
            if line.trim_end() == END {
                blocks.insert(name, block);
            } else {
                current = Some((name, block));
            }
        }
    }
    blocks
}

/// A line diff of two blocks: the lines only in `old` (-) and only in `new` (+).
fn block_diff(old: &str, new: &str) -> String {
    let old_lines: BTreeSet<&str> = old.lines().collect();
    let new_lines: BTreeSet<&str> = new.lines().collect();
    let mut text = String::new();
    for line in old.lines().filter(|l| !new_lines.contains(l)) {
        text.push_str(&format!("  - {line}\n"));
    }
    for line in new.lines().filter(|l| !old_lines.contains(l)) {
        text.push_str(&format!("  + {line}\n"));
    }
    text
}

#[test]
fn cli_reference_in_docs_matches_the_code() {
    let path = repo().join("docs/cli.md");
    let doc = fs::read_to_string(&path).unwrap();
    let generated: BTreeMap<String, String> = generated_blocks().into_iter().collect();
    let (updated, problems) = splice(&doc, &generated);
    assert!(
        problems.is_empty(),
        "docs/cli.md's generated blocks:\n- {}",
        problems.join("\n- ")
    );
    if updated == doc {
        return;
    }
    if std::env::var_os("DSV_UPDATE_DOCS").is_some_and(|v| v == "1") {
        fs::write(&path, &updated).unwrap();
        eprintln!("rewrote the generated blocks of {}", path.display());
        return;
    }
    let old = blocks_of(&doc);
    let mut diff = String::new();
    for (name, new) in &generated {
        if old.get(name) != Some(new) {
            let was = old.get(name).map_or("", String::as_str);
            diff.push_str(&format!("`{name}`:\n{}", block_diff(was, new)));
        }
    }
    panic!(
        "docs/cli.md is stale: its generated blocks differ from the clap definitions. Run \
         scripts/gen-docs (DSV_UPDATE_DOCS=1 cargo nextest run -E 'test(cli_reference)') \
         and commit docs/cli.md.\n{diff}"
    );
}

/// The README's `## Status` section: its shipped part (before the `Planned:` paragraph) and
/// its planned part.
fn readme_status() -> (String, String) {
    let readme = fs::read_to_string(repo().join("README.md")).unwrap();
    let start = readme
        .find("\n## Status\n")
        .expect("README.md has a `## Status` section");
    let section = &readme[start + 1..];
    let section = &section[..section[1..]
        .find("\n## ")
        .map_or(section.len(), |end| end + 1)];
    let (shipped, planned) = section
        .split_once("\nPlanned:")
        .expect("README.md's status section has a paragraph starting `Planned:`");
    (shipped.to_string(), planned.to_string())
}

/// The words of `text` (letters, digits, `-` and `_`).
fn words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '-' || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect()
}

/// The README's status section cannot drift from the commands: every top-level command
/// `dsv --help` lists is named as shipped (in backticks, as `` `mount` `` or `` `cache`
/// (`ls`/`prune`) ``), and the planned paragraph names none of them, nor does the shipped part
/// call anything planned.
#[test]
fn readme_status_lists_every_command_as_shipped_and_none_as_planned() {
    let (shipped, planned) = readme_status();
    let spans: BTreeSet<String> = shipped
        .split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|span| span.split_whitespace().next())
        .map(str::to_string)
        .collect();
    let top_level: Vec<String> = commands()
        .into_iter()
        .filter_map(|c| c.strip_prefix("dsv ").map(str::to_string))
        .filter(|c| !c.contains(' '))
        .collect();
    assert!(top_level.len() > 30, "{top_level:?}");
    let missing: Vec<&String> = top_level.iter().filter(|c| !spans.contains(*c)).collect();
    assert!(
        missing.is_empty(),
        "README.md's status section does not name these commands as shipped (in backticks, \
         before the `Planned:` paragraph): {missing:?}"
    );
    let planned_words = words(&planned);
    let called_planned: Vec<&String> = top_level
        .iter()
        .filter(|c| planned_words.contains(*c))
        .collect();
    assert!(
        called_planned.is_empty(),
        "README.md's `Planned:` paragraph names commands that ship: {called_planned:?}; \
         move them to the shipped part"
    );
    assert!(
        !words(&shipped).contains("planned"),
        "README.md's status section calls something planned outside its `Planned:` paragraph"
    );
}

#[test]
fn cli_reference_splice_finds_stale_missing_and_unknown_blocks() {
    let blocks: BTreeMap<String, String> = [
        (
            "dsv a".to_string(),
            format!("{BEGIN}dsv a -->\nnew a\n{END}\n"),
        ),
        (
            "dsv b".to_string(),
            format!("{BEGIN}dsv b -->\nnew b\n{END}\n"),
        ),
    ]
    .into();
    let doc = format!("intro\n{BEGIN}dsv a -->\nold a\n{END}\nprose\n{BEGIN}dsv gone -->\n{END}\n");
    let (out, problems) = splice(&doc, &blocks);
    assert_eq!(
        out,
        format!("intro\n{BEGIN}dsv a -->\nnew a\n{END}\nprose\n{BEGIN}dsv gone -->\n{END}\n")
    );
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].contains("`dsv gone`"), "{problems:?}");
    assert!(problems[1].contains("no block for `dsv b`"), "{problems:?}");
}

/// GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces
/// as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings (outside code blocks), with GitHub's `-1`,
/// `-2` suffixes for repeats.
fn anchors(doc: &str) -> BTreeSet<String> {
    let mut seen = BTreeMap::<String, usize>::new();
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in doc.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let base = anchor(line.trim_start_matches('#'));
        let n = seen.entry(base.clone()).or_default();
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

#[test]
fn cli_reference_links_into_cli_md_resolve() {
    let cli = fs::read_to_string(repo().join("docs/cli.md")).unwrap();
    let targets = anchors(&cli);
    let link = regex::Regex::new(r"\]\((?:(?:docs/)?cli\.md)?#([^)\s]+)\)").unwrap();
    let mut files = vec![repo().join("README.md")];
    for entry in fs::read_dir(repo().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    let mut broken = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).unwrap();
        let is_cli = file.ends_with("docs/cli.md");
        for captures in link.captures_iter(&text) {
            let whole = captures.get(0).unwrap().as_str();
            // A bare `#anchor` is a link into the file itself: only cli.md's are checked here.
            if !is_cli && !whole.contains("cli.md") {
                continue;
            }
            if !targets.contains(&captures[1]) {
                broken.push(format!("{}: {whole}", file.display()));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links to no heading of docs/cli.md:\n{}",
        broken.join("\n")
    );
}

#[test]
fn every_command_help_has_examples() {
    let env = TestEnv::bare();
    let mut missing = Vec::new();
    for name in commands() {
        let mut args: Vec<&str> = name.split(' ').skip(1).collect();
        args.push("--help");
        let help = env.ok(&args);
        if !help.contains("\nExamples:\n  dsv ") {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "commands whose --help has no \"Examples:\" section (add one to the doc comment, with \
         #[command(verbatim_doc_comment)]): {}",
        missing.join(", ")
    );
}

#[test]
fn completions_cover_every_command_in_each_shell() {
    let env = TestEnv::bare();
    // The last word of each command: `ls` stands for `dsv cache ls` and `dsv remote ls` alike.
    let words: BTreeSet<String> = commands()
        .iter()
        .map(|c| c.rsplit(' ').next().unwrap().to_string())
        .collect();
    for shell in ["bash", "zsh", "fish", "powershell"] {
        let script = env.ok(&["completions", shell]);
        assert!(script.len() > 1000, "{shell}: {} bytes", script.len());
        let absent: Vec<&String> = words.iter().filter(|w| !script.contains(*w)).collect();
        assert!(absent.is_empty(), "{shell} completion lacks {absent:?}");
        assert!(!script.contains("__reference"), "{shell}: a hidden command");
    }
    // Flags and their values too.
    let bash = env.ok(&["completions", "bash"]);
    assert!(
        bash.contains("--files-from"),
        "bash completion lacks --files-from"
    );
    let out = env.dsv().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

#[test]
fn man_writes_a_readable_page_per_command() {
    let env = TestEnv::bare();
    let report = env.json(&["man", "--out", "man/man1"]);
    let dir = env.path("man/man1");
    let mut expected: BTreeSet<String> = commands()
        .iter()
        .map(|c| format!("{}.1", c.replace(' ', "-")))
        .collect();
    expected.insert("dsv.1".into());
    let written: BTreeSet<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(written, expected);
    assert_eq!(report["pages"].as_array().unwrap().len(), expected.len());
    // Without man, the part that reads the pages with `man -l` is skipped (and reported).
    let man_available = !crate::common::skip_for("man", crate::common::lacks_tool("man"));
    for page in &expected {
        let path = dir.join(page);
        let name = page.trim_end_matches(".1");
        let roff = fs::read_to_string(&path).unwrap();
        assert!(
            roff.contains(&format!(".TH {name} 1 ")),
            "{page}: no title header"
        );
        if man_available {
            let shown = man_l(&path);
            assert!(
                shown.contains("NAME") && shown.contains(name),
                "{page}: man -l shows {shown:?}"
            );
        }
    }
    if man_available {
        // Subcommands, options and their help all reach the page.
        let shown = man_l(&dir.join("dsv-checkout.1"));
        assert!(shown.contains("--files-from"), "{shown}");
        assert!(
            shown.contains("dsv checkout mnist@v3 /scratch/mnist"),
            "{shown}"
        );
    }
    let text = env.ok(&["man", "--out", "again"]);
    assert_eq!(
        text.trim(),
        format!(
            "Wrote {} man pages to again (dsv.1, dsv-COMMAND.1)",
            expected.len()
        )
    );
    // A directory that cannot be made is the operating system's refusal: exit 6.
    env.write("file", "x");
    env.fails(&["man", "--out", "file/man1"], 6);
}

/// What `man -l PAGE` prints, as plain text.
fn man_l(page: &Path) -> String {
    let out = std::process::Command::new("man")
        .args(["-P", "cat", "-l"])
        .arg(page)
        .env("MANWIDTH", "100")
        .env("MAN_KEEP_FORMATTING", "0")
        .output()
        .unwrap();
    assert!(out.status.success(), "man -l {}: {out:?}", page.display());
    // Overstrike (bold as `X\bX`) is dropped.
    let text = String::from_utf8_lossy(&out.stdout);
    let mut plain = String::new();
    for c in text.chars() {
        if c == '\u{8}' {
            plain.pop();
        } else {
            plain.push(c);
        }
    }
    plain
}

#[test]
fn global_options_have_their_own_help_heading() {
    let env = TestEnv::bare();
    for args in [
        &["--help"][..],
        &["checkout", "--help"],
        &["cache", "prune", "-h"],
    ] {
        let help = env.ok(args);
        let (_, global) = help
            .split_once("\nGlobal options:\n")
            .unwrap_or_else(|| panic!("{args:?}: no Global options heading:\n{help}"));
        for flag in ["--store <PATH>", "--json", "--quiet", "--no-progress"] {
            assert!(
                global.contains(flag),
                "{args:?}: {flag} not under Global options"
            );
        }
    }
}

#[test]
fn revision_arguments_spell_out_the_revision_syntax() {
    let env = TestEnv::bare();
    for args in [
        &["checkout", "--help"][..],
        &["show", "--help"],
        &["export", "--help"],
        &["pin", "--help"],
        &["lock", "--help"],
        &["audit", "--help"],
        &["ls", "--help"],
    ] {
        let help = env
            .ok(args)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        for form in [
            "NAME@TAG",
            "NAME@latest",
            "NAME@<id prefix, 4+ hex digits>",
            "~N",
        ] {
            assert!(help.contains(form), "{args:?} lacks {form}: {help}");
        }
    }
    let checkout = env.ok(&["checkout", "--help"]);
    assert!(checkout.contains("REMOTE/REV"), "{checkout}");
}

/// docs/cli.md: "Without `--lock`, both `REVISION` and `DIR` are required" — a usage
/// error from clap, exit 2.
#[test]
fn checkout_without_a_directory_is_a_usage_error_as_documented() {
    let env = TestEnv::new();
    env.write("data/a", "a");
    env.ok(&["commit", "data", "--dataset", "d"]);
    let err = env.fails(&["checkout", "d"], 2);
    assert!(err.contains("<DIR>"), "{err}");
    env.fails(&["checkout"], 2);
    // With --lock, a revision is one argument too many: a usage error too.
    env.write("dsv.lock", env.ok(&["lock", "d"]));
    env.fails(&["checkout", "--lock", "dsv.lock", "d", "out"], 2);
}

/// docs/cli.md: "A version whose tree names `.dsv` or `.dsv-tmp-*` at any depth is refused
/// (`UnsafePath`, exit 5)", before the directory is touched.
#[test]
fn a_version_naming_dsv_is_refused_at_checkout_with_exit_5() {
    use dsv::object::{EntryKind, TreeEntry};
    let env = TestEnv::new();
    env.write("data/a", "a");
    env.ok(&["commit", "data", "--dataset", "d"]);
    // A tree made by hand (a hostile store): its only entry is a link named `.dsv`.
    crate::common::plant_one_entry(
        &env,
        "d",
        TreeEntry {
            name: ".dsv".into(),
            kind: EntryKind::Symlink { target: "a".into() },
            size: 1,
            id: dsv::ObjectId::of(b"a"),
        },
    );
    let error = env.json_error(&["checkout", "d", "out"], 5);
    assert!(
        error["message"].as_str().unwrap().contains("unsafe path"),
        "{error}"
    );
    assert!(!env.path("out/.dsv").exists(), "nothing written");
}
