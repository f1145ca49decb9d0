//! docs/architecture.md and docs/format.md cannot drift from the code: format.md's migration
//! table is the migrations directory and the catalog's `include_str!` list; its store
//! directory table names every entry the code makes under `.dsv` and nothing it never makes;
//! each constant's value in architecture.md is the code's; its layer table is each crate's `Cargo.toml` and `lib.rs`; and each test its
//! invariants cite exists. `each_check_catches_a_doc_that_disagrees` shows every check fail on
//! a mutated doc.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::common::{TestEnv, pseudo_random, push_to_file_remote, wait_until};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn architecture() -> String {
    fs::read_to_string(repo().join("docs/architecture.md")).unwrap()
}

/// docs/format.md: the store directory's table and the catalog's migrations are there.
fn format_doc() -> String {
    fs::read_to_string(repo().join("docs/format.md")).unwrap()
}

/// The text of the `## heading` section (up to the next `## `).
fn section<'a>(doc: &'a str, heading: &str) -> &'a str {
    let start = doc
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("the doc has no section \"## {heading}\""));
    let body = &doc[start + heading.len() + 5..];
    &body[..body.find("\n## ").unwrap_or(body.len())]
}

/// The cells of the first Markdown table of `text`, header and rule left out.
fn table(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(2)
        .map(|line| {
            line.trim()
                .trim_matches('|')
                .split('|')
                .map(|cell| cell.trim().to_string())
                .collect()
        })
        .collect()
}

/// What stands between backticks in `text`, in order.
fn ticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// A source file named by its path in the workspace (`crates/dsv/src/ops/gc.rs`,
/// `src/main.rs`), when it exists.
fn source_file(repo: &Path, named: &str) -> Option<PathBuf> {
    Some(repo.join(named)).filter(|p| p.is_file())
}

/// Every `.rs` file of the library crates and the CLI.
fn rust_sources() -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut roots = vec![repo().join("src")];
    if let Ok(crates) = fs::read_dir(repo().join("crates")) {
        roots.extend(crates.map(|c| c.unwrap().path().join("src")));
    }
    for root in roots {
        for entry in walkdir::WalkDir::new(root)
            .into_iter()
            .filter_map(|e| e.ok())
        {
            if entry.path().extension().is_some_and(|e| e == "rs") {
                files.push(entry.into_path());
            }
        }
    }
    files
}

// ---- (a) migrations ----

/// What is wrong with format.md's migration table (its first column's `.sql` names, in order).
fn migration_problems(doc: &str) -> Vec<String> {
    let listed: Vec<String> = table(section(doc, "Catalog schema"))
        .iter()
        .flat_map(|row| ticked(&row[0]))
        .filter(|name| name.ends_with(".sql"))
        .collect();
    let dir = repo().join("crates/dsv-store/migrations");
    let mut files: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".sql"))
        .collect();
    files.sort();
    let catalog = repo().join("crates/dsv-store/src/catalog/mod.rs");
    let included: Vec<String> = regex::Regex::new(r#"include_str!\("[^"]*/([^"/]+\.sql)"\)"#)
        .unwrap()
        .captures_iter(&fs::read_to_string(&catalog).unwrap())
        .map(|c| c[1].to_string())
        .collect();
    let mut problems = Vec::new();
    if listed != files {
        problems.push(format!(
            "the migrations listed {listed:?} are not the files of {}: {files:?}",
            dir.display()
        ));
    }
    if listed != included {
        problems.push(format!(
            "the migrations listed {listed:?} are not those {} includes: {included:?}",
            catalog.display()
        ));
    }
    problems
}

#[test]
fn the_migrations_listed_are_the_files_and_the_catalogs() {
    let problems = migration_problems(&format_doc());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// ---- (b) the store directory ----

/// The relative paths of everything under `dir` (directories with a trailing `/`).
fn entries_under(dir: &Path, into: &mut BTreeSet<String>) {
    for entry in walkdir::WalkDir::new(dir).min_depth(1) {
        let Ok(entry) = entry else { continue }; // a lease or a lock file gone meanwhile
        let relative = entry.path().strip_prefix(dir).unwrap().to_str().unwrap();
        let slash = if entry.file_type().is_dir() { "/" } else { "" };
        into.insert(format!("{relative}{slash}"));
    }
}

/// Everything that operations without a mount make under `.dsv`: init, commit, status,
/// checkout, config, a read (alive, holding its lease), push, clone, a read and a pull that
/// fetch from a remote, a ref log line that never committed, repair, gc.
fn entries_made() -> BTreeSet<String> {
    let env = TestEnv::new();
    env.write("data/a.bin", pseudo_random(400_000, 1));
    env.write("data/b.txt", "b\n");
    env.write("other/c.bin", pseudo_random(300_000, 2));
    env.ok(&["commit", "data", "-d", "ds", "-t", "v1"]);
    env.ok(&["commit", "other", "-d", "other"]);
    env.ok(&["status", "data"]);
    env.ok(&["checkout", "ds@v1", "out"]);
    env.ok(&["config", "set", "core.jobs", "2"]);
    let mut seen = BTreeSet::new();

    // A reader blocked on a full pipe holds its lease and the catalog open.
    let mut reader = env.spawn(&["cat", "ds:a.bin"]);
    let leases = env.path(".dsv/leases");
    wait_until("a lease while `dsv cat` runs", || {
        fs::read_dir(&leases).is_ok_and(|mut d| d.next().is_some())
    });
    entries_under(&env.path(".dsv"), &mut seen);
    reader.kill().unwrap();
    reader.wait().unwrap();

    // Remotes: a clone reads one dataset (the read engine's fetch locks) and pulls the other
    // (the download lock).
    let (_remote, url) = push_to_file_remote(&env, "remote", "ds");
    env.ok(&["push", "other"]);
    env.ok(&["clone", &url, "clone"]);
    let read = env.run(&["--store", "clone", "cat", "ds:a.bin"]);
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    env.ok(&["--store", "clone", "pull", "other"]);
    entries_under(&env.path("clone/.dsv"), &mut seen);

    // A ref log line past the length the catalog recorded is set aside by the next change.
    let log = env.path(".dsv/reflog");
    let mut text = fs::read_to_string(&log).unwrap();
    text.push_str(&format!(
        "{{\"time\":1,\"op\":\"head\",\"dataset\":\"ds\",\"version\":\"{}\"}}\n",
        "cd".repeat(32)
    ));
    fs::write(&log, text).unwrap();
    env.write("data/b.txt", "b2\n");
    env.ok(&["commit", "data", "-d", "ds"]);

    env.ok(&["repair"]);
    env.ok(&["gc"]);
    entries_under(&env.path(".dsv"), &mut seen);
    seen
}

/// The names the code joins to a store's root (`root.join("packs")`), but those of other
/// directories that are called `root` too.
fn names_in_code() -> BTreeSet<String> {
    const ELSEWHERE: &[&str] = &["refs.lock"]; // a `file://` remote's root
    let join = regex::Regex::new(r#"\broot(?:\(\))?\.join\("([^"]+)"\)"#).unwrap();
    let mut names = BTreeSet::new();
    for file in rust_sources() {
        let text = fs::read_to_string(&file).unwrap();
        // Unit tests join names to roots of their own.
        let text = text.split("#[cfg(test)]\nmod tests").next().unwrap();
        // Comments (a doc example's `root.join("data")`) name no store entry.
        for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for captures in join.captures_iter(line) {
                if !ELSEWHERE.contains(&&captures[1]) {
                    names.insert(captures[1].to_string());
                }
            }
        }
    }
    names
}

/// Every string literal of the sources, joined.
fn literals_in_code() -> String {
    let literal = regex::Regex::new(r#""((?:[^"\\\n]|\\.)*)""#).unwrap();
    let mut out = String::new();
    for file in rust_sources() {
        let text = fs::read_to_string(&file).unwrap();
        for captures in literal.captures_iter(&text) {
            out.push_str(&captures[1]);
            out.push('\n');
        }
    }
    out
}

/// A documented path as a pattern: `<...>` stands for any name part.
fn path_pattern(path: &str) -> regex::Regex {
    let mut pattern = String::from("^");
    for (i, part) in path.split(['<', '>']).enumerate() {
        pattern.push_str(&if i % 2 == 0 {
            regex::escape(part)
        } else {
            "[^/]+".to_string()
        });
    }
    pattern.push('$');
    regex::Regex::new(&pattern).unwrap()
}

fn layout_problems(
    doc: &str,
    seen: &BTreeSet<String>,
    code_names: &BTreeSet<String>,
    literals: &str,
) -> Vec<String> {
    let rows: Vec<String> = table(section(doc, "Store directory"))
        .into_iter()
        .map(|row| ticked(&row[0]).into_iter().next().unwrap_or_default())
        .collect();
    let patterns: Vec<_> = rows.iter().map(|row| path_pattern(row)).collect();
    let mut problems = Vec::new();
    // A name joined in the code may be a file's or a directory's.
    let is_documented = |e: &str| {
        patterns
            .iter()
            .any(|p| p.is_match(e) || p.is_match(&format!("{e}/")))
    };
    for entry in seen.iter().chain(code_names) {
        if !is_documented(entry) {
            problems.push(format!(
                "`.dsv/{entry}` is made by the code but not documented"
            ));
        }
    }
    for (row, pattern) in rows.iter().zip(&patterns) {
        let made = |e: &String| pattern.is_match(e) || pattern.is_match(&format!("{e}/"));
        if seen.iter().any(made) || code_names.iter().any(made) {
            continue;
        }
        // Not made by the operations above (a pack being written, a kill's leftovers): each
        // word of its name must at least be in the code.
        let name = row.trim_end_matches('/').rsplit('/').next().unwrap();
        let missing: Vec<&str> = name
            .split(['<', '>'])
            .step_by(2)
            .flat_map(|part| part.split(['.', '-']))
            .filter(|word| word.len() >= 2 && !literals.contains(*word))
            .collect();
        if !missing.is_empty() || name.is_empty() {
            problems.push(format!(
                "`.dsv/{row}` is documented but nothing makes it (no literal holds {missing:?})"
            ));
        }
    }
    problems
}

#[test]
fn the_store_directory_table_names_what_the_code_makes_and_nothing_else() {
    let seen = entries_made();
    for expected in ["catalog.db", "reflog", "packs/", "data.lock", "leases/"] {
        assert!(seen.contains(expected), "{expected} not made: {seen:?}");
    }
    let problems = layout_problems(&format_doc(), &seen, &names_in_code(), &literals_in_code());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// ---- (c) constants ----

#[derive(Debug, PartialEq)]
enum Value {
    Int(u128),
    Secs(u64),
    Text(String),
}

fn number(text: &str) -> Option<u128> {
    text.trim().replace([',', '_'], "").parse().ok()
}

/// A value as the doc writes it: `32 MiB`, `131,072`, `180 s`, `".dsv"`.
fn doc_value(text: &str) -> Option<Value> {
    if let Some(s) = text.strip_prefix('"') {
        return Some(Value::Text(s.strip_suffix('"')?.to_string()));
    }
    if let Some(secs) = text.strip_suffix(" s") {
        return Some(Value::Secs(number(secs)? as u64));
    }
    for (unit, scale) in [(" KiB", 1u128 << 10), (" MiB", 1 << 20), (" GiB", 1 << 30)] {
        if let Some(n) = text.strip_suffix(unit) {
            return Some(Value::Int(number(n)? * scale));
        }
    }
    Some(Value::Int(number(text)?))
}

/// A constant expression as the code writes it: integer literals with `*`, `+` and `<<`,
/// `Duration::from_secs(N)`, a string literal.
fn code_value(expr: &str) -> Option<Value> {
    let expr = expr.trim();
    if let Some(s) = expr.strip_prefix('"') {
        return Some(Value::Text(s.strip_suffix('"')?.to_string()));
    }
    if let Some(at) = expr.find("Duration::from_secs(") {
        let rest = &expr[at + "Duration::from_secs(".len()..];
        return Some(Value::Secs(number(rest.strip_suffix(')')?)? as u64));
    }
    let shifts: Option<Vec<u128>> = expr
        .split("<<")
        .map(|sum| {
            sum.split('+')
                .map(|product| product.split('*').map(number).product::<Option<u128>>())
                .sum::<Option<u128>>()
        })
        .collect();
    let shifts = shifts?;
    Some(Value::Int(
        shifts[1..].iter().fold(shifts[0], |v, s| v << *s as u32),
    ))
}

/// The value of `NAME` (or `Type::NAME.field`) in `source`.
fn const_in(source: &str, name: &str) -> Option<String> {
    let (path, field) = match name.split_once('.') {
        Some((path, field)) => (path, Some(field)),
        None => (name, None),
    };
    let base = path.rsplit("::").next().unwrap();
    let decl = regex::Regex::new(&format!(
        r"(?s)\bconst {}: [^=]+=\s+(.+?);",
        regex::escape(base)
    ))
    .unwrap();
    let value = decl.captures(source)?[1].to_string();
    match field {
        None => Some(value),
        Some(field) => {
            let field =
                regex::Regex::new(&format!(r"\b{}: ([^,}}]+)", regex::escape(field))).unwrap();
            Some(field.captures(&value)?[1].trim().to_string())
        }
    }
}

fn constant_problems(repo: &Path, doc: &str) -> Vec<String> {
    let rows = table(section(doc, "Constants"));
    let mut problems = Vec::new();
    if rows.len() < 20 {
        problems.push(format!("only {} constants in the table", rows.len()));
    }
    for row in rows {
        let name = ticked(&row[0]).concat();
        let stated = ticked(&row[1]).concat();
        let Some(file) = source_file(repo, &row[2]) else {
            problems.push(format!("{name}: no file {}", row[2]));
            continue;
        };
        let Some(expr) = const_in(&fs::read_to_string(&file).unwrap(), &name) else {
            problems.push(format!("{name}: no such constant in {}", file.display()));
            continue;
        };
        match (doc_value(&stated), code_value(&expr)) {
            (Some(doc), Some(code)) if doc == code => {}
            (doc, code) => problems.push(format!(
                "{name}: the doc says `{stated}` ({doc:?}), {} says `{expr}` ({code:?})",
                file.display()
            )),
        }
    }
    problems
}

#[test]
fn the_constants_table_states_the_codes_values() {
    let problems = constant_problems(&repo(), &architecture());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// ---- (d) layers ----

struct Layer {
    krate: String,
    path: String,
    modules: BTreeSet<String>,
    depends: BTreeSet<String>,
}

fn layers(doc: &str) -> Vec<Layer> {
    table(section(doc, "Layers"))
        .into_iter()
        .map(|row| Layer {
            krate: row[0].clone(),
            path: row[1].clone(),
            modules: ticked(&row[2]).into_iter().collect(),
            depends: row[3]
                .split(',')
                .map(|d| d.trim().to_string())
                .filter(|d| !d.is_empty() && d != "—")
                .collect(),
        })
        .collect()
}

/// The modules a `lib.rs` declares (`mod x;`, `pub mod x;`, `pub(crate) mod x;`).
fn declared_modules(lib: &str) -> BTreeSet<String> {
    regex::Regex::new(r"(?m)^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;")
        .unwrap()
        .captures_iter(lib)
        .map(|c| c[1].to_string())
        .collect()
}

/// A manifest's package name and the names of its dependencies (every `dependencies` table,
/// renamed ones by their `package`).
fn manifest(text: &str) -> (Option<String>, BTreeSet<String>) {
    let mut name = None;
    let mut deps = BTreeSet::new();
    let mut table = String::new();
    let package = regex::Regex::new(r#"package\s*=\s*"([^"]+)""#).unwrap();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            table = line.trim_matches(['[', ']']).to_string();
            if let Some(dep) = table.strip_prefix("dependencies.") {
                deps.insert(dep.to_string());
            }
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if table == "package" && key == "name" {
            name = Some(value.trim().trim_matches('"').to_string());
        } else if table == "dependencies"
            || (table.ends_with(".dependencies") && table != "workspace.dependencies")
        {
            let dep = match package.captures(value) {
                Some(c) => c[1].to_string(),
                None => key.split('.').next().unwrap().trim().to_string(),
            };
            deps.insert(dep);
        }
    }
    (name, deps)
}

/// What is wrong with the layer table: each row's crate against its Cargo.toml (package name,
/// dependencies on the table's crates) and its lib.rs (the modules it declares).
fn layer_problems(repo: &Path, doc: &str) -> Vec<String> {
    let layers = layers(doc);
    let mut problems = Vec::new();
    if layers.len() < 5 {
        problems.push(format!("only {} rows in the layer table", layers.len()));
    }
    let names: BTreeSet<&str> = layers.iter().map(|l| l.krate.as_str()).collect();
    for layer in &layers {
        let dir = repo.join(&layer.path);
        let Ok(text) = fs::read_to_string(dir.join("Cargo.toml")) else {
            problems.push(format!("{}: no {}/Cargo.toml", layer.krate, layer.path));
            continue;
        };
        let (name, deps) = manifest(&text);
        if name.as_deref() != Some(layer.krate.as_str()) {
            problems.push(format!(
                "{}/Cargo.toml names the package {name:?}, not {}",
                layer.path, layer.krate
            ));
        }
        let deps: BTreeSet<String> = deps
            .into_iter()
            .filter(|d| names.contains(d.as_str()))
            .collect();
        if deps != layer.depends {
            problems.push(format!(
                "{} depends on {deps:?}, the table says {:?}",
                layer.krate, layer.depends
            ));
        }
        match fs::read_to_string(dir.join("src/lib.rs")) {
            Ok(lib) if declared_modules(&lib) == layer.modules => {}
            Ok(lib) => problems.push(format!(
                "{}/src/lib.rs declares {:?}, the table says {:?}",
                layer.path,
                declared_modules(&lib),
                layer.modules
            )),
            Err(_) => problems.push(format!("{}: no {}/src/lib.rs", layer.krate, layer.path)),
        }
    }
    problems
}

#[test]
fn the_layer_table_is_the_workspaces_crates() {
    let problems = layer_problems(&repo(), &architecture());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The per-crate checks, on a made-up workspace.
#[test]
fn the_layer_check_reads_manifests_and_lib_rs() {
    let dir = tempfile::tempdir().unwrap();
    let write =
        |path: &str, text: &str| crate::common::write_file(&dir.path().join(path), text.as_bytes());
    write(
        "crates/low/Cargo.toml",
        "[package]\nname = \"low\"\n\n[dependencies]\nserde = \"1\"\n",
    );
    write(
        "crates/low/src/lib.rs",
        "pub mod a;\npub(crate) mod b;\n#[cfg(test)]\nmod tests {}\n",
    );
    write(
        "crates/high/Cargo.toml",
        "[package]\nname = \"high\"\n[dependencies]\nlow = { path = \"../low\" }\n[dev-dependencies]\nmid = { path = \"../mid\" }\n",
    );
    write("crates/high/src/lib.rs", "pub use low::a;\nmod c;\n");
    let doc = |rows: &str| {
        format!(
            "\n## Layers\n\n| crate | path | modules | depends on |\n| --- | --- | --- | --- |\n{rows}\n## Next\n"
        )
    };
    let good = "| low | crates/low | `a`, `b` | — |\n| high | crates/high | `c` | low |\n\
                | low | crates/low | `a`, `b` | — |\n| low | crates/low | `a`, `b` | — |\n\
                | low | crates/low | `a`, `b` | — |\n";
    let problems = layer_problems(dir.path(), &doc(good));
    assert!(problems.is_empty(), "{problems:?}");
    for bad in [
        good.replace("`a`, `b`", "`a`"),
        good.replace("| `c` | low |", "| `c` | — |"),
        good.replace("| high | crates/high", "| higher | crates/high"),
        good.replace("crates/high", "crates/gone"),
    ] {
        let problems = layer_problems(dir.path(), &doc(&bad));
        assert!(!problems.is_empty(), "not caught:\n{bad}");
    }
}

// ---- (e) the tests the invariants cite ----

fn invariant_problems(doc: &str) -> Vec<String> {
    let cited: Vec<String> = ticked(section(doc, "Invariants"))
        .into_iter()
        .filter(|t| regex::Regex::new(r"^\w+::\w+$").unwrap().is_match(t))
        .collect();
    let mut problems = Vec::new();
    if cited.len() < 8 {
        problems.push(format!("only {} tests cited", cited.len()));
    }
    for test in cited {
        let (file, name) = test.split_once("::").unwrap();
        let text =
            fs::read_to_string(repo().join(format!("tests/it/{file}.rs"))).unwrap_or_default();
        if !text.contains(&format!("fn {name}(")) {
            problems.push(format!("{test}: no such test in tests/it/{file}.rs"));
        }
    }
    problems
}

#[test]
fn the_tests_the_invariants_cite_exist() {
    let problems = invariant_problems(&architecture());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// ---- every check fails on a doc that disagrees ----

#[test]
fn each_check_catches_a_doc_that_disagrees() {
    let doc = architecture();
    let mutate = |old: &str, new: &str| {
        assert!(doc.contains(old), "{old:?} is not in the doc");
        doc.replacen(old, new, 1)
    };

    let format = format_doc();
    let mutate_format = |old: &str, new: &str| {
        assert!(format.contains(old), "{old:?} is not in format.md");
        format.replacen(old, new, 1)
    };
    let dropped = mutate_format(
        "| `0011_stat_cache_vouches_for_the_version.sql`",
        "| (gone)",
    );
    assert_eq!(migration_problems(&dropped).len(), 2);

    // The store directory, against what its literal rows say the code made.
    let made: BTreeSet<String> = table(section(&format, "Store directory"))
        .iter()
        .map(|row| ticked(&row[0]).concat())
        .filter(|path| !path.contains('<'))
        .collect();
    let literals = literals_in_code();
    let none = BTreeSet::new();
    assert!(layout_problems(&format, &made, &none, &literals).is_empty());
    let unlisted = mutate_format("| `data.lock` |", "| `data.lock.old` |");
    assert!(!layout_problems(&unlisted, &made, &none, &literals).is_empty());
    let invented = mutate_format(
        "| `config.toml` |",
        "| `ghost.cache` | x |\n| `config.toml` |",
    );
    let problems = layout_problems(&invented, &made, &none, &literals);
    assert!(
        problems.iter().any(|p| p.contains("ghost.cache")),
        "{problems:?}"
    );

    let wrong = mutate(
        "| `PACK_TARGET` | `32 MiB` |",
        "| `PACK_TARGET` | `64 MiB` |",
    );
    assert_eq!(constant_problems(&repo(), &wrong).len(), 1);
    let unknown = mutate("| `FETCH_SPAN` |", "| `FETCH_SPANS` |");
    assert_eq!(constant_problems(&repo(), &unknown).len(), 1);

    let moved = mutate("`shard`, `ops` |", "`ops` |");
    assert!(!layer_problems(&repo(), &moved).is_empty());

    let renamed = mutate(
        "`read::the_lease_of_a_killed_reader_expires`",
        "`read::the_lease_of_a_killed_reader_lives_on`",
    );
    assert_eq!(invariant_problems(&renamed).len(), 1);
}

#[test]
fn values_parse_as_written() {
    let cases: BTreeMap<&str, Option<Value>> = [
        ("32 * 1024 * 1024", Some(Value::Int(32 << 20))),
        ("1 << 17", Some(Value::Int(131_072))),
        ("FRAME_TARGET + 1", None),
        (
            "std::time::Duration::from_secs(180)",
            Some(Value::Secs(180)),
        ),
        ("\".dsv\"", Some(Value::Text(".dsv".into()))),
        ("100_000_000", Some(Value::Int(100_000_000))),
    ]
    .into_iter()
    .collect();
    for (expr, value) in cases {
        assert_eq!(code_value(expr), value, "{expr}");
    }
    assert_eq!(doc_value("32 MiB"), Some(Value::Int(32 << 20)));
    assert_eq!(doc_value("131,072"), Some(Value::Int(131_072)));
    assert_eq!(doc_value("180 s"), Some(Value::Secs(180)));
}

// ---- the module graph ----

/// Within each crate the modules form a DAG, as the crates do between them (Cargo holds
/// that): `scripts/module-graph` (which the docs point at for the graph and its sizes) finds
/// no cycle. The Python extension too: its `Store` and `Version` classes return each other
/// (`Store.version()`, `Version.store`), but what a version needs of its store is the
/// store's state (`store_state.rs`), not the `Store` class's module.
#[test]
fn the_library_crates_modules_form_no_cycle() {
    let report = module_graph(&repo());
    let crates = report["crates"].as_array().unwrap();
    assert!(crates.len() >= 6, "{report}");
    for krate in crates {
        let name = krate["name"].as_str().unwrap();
        assert_eq!(
            krate["cycles"],
            serde_json::json!([]),
            "the modules of {name} form a cycle: {}",
            krate["edges"]
        );
    }
}

/// `scripts/module-graph --json ROOT`, parsed.
fn module_graph(root: &Path) -> serde_json::Value {
    let output = std::process::Command::new("python3")
        .arg(repo().join("scripts/module-graph"))
        .arg("--json")
        .arg(root)
        .output()
        .expect("python3 runs scripts/module-graph");
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout).unwrap()
}

/// No lateral circle among the files of any crate: a file names a module outside its own
/// subtree (`crate::a::b`, `super::b`, `use` groups, followed through re-exports to the file
/// the item lives in) only if that module does not name it back, directly or around a circle.
/// A parent naming its own children (re-exports, a parent calling its steps) and a child
/// naming its parent are not lateral. A shared mechanism belongs below the operations that
/// use it, a composite above them.
#[test]
fn no_crate_has_a_lateral_circle_among_its_files() {
    let report = module_graph(&repo());
    let crates = report["crates"].as_array().unwrap();
    let names: BTreeSet<&str> = crates.iter().map(|c| c["name"].as_str().unwrap()).collect();
    for expected in [
        "dsv-format",
        "dsv-store",
        "dsv-remote",
        "dsv",
        "dsv-mount",
        "dsv-cli",
        "dsv-python",
    ] {
        assert!(names.contains(expected), "{expected} missing: {names:?}");
    }
    let dsv = crates.iter().find(|c| c["name"] == "dsv").unwrap();
    assert!(
        dsv["files"].as_object().unwrap().len() > 30 && dsv["file_edges"]["ops::status"].is_array(),
        "the file graph of dsv lists its files: {}",
        dsv["files"]
    );
    for krate in crates {
        let name = krate["name"].as_str().unwrap();
        assert_eq!(
            krate["file_cycles"],
            serde_json::json!([]),
            "files of {name} name each other in a circle (`scripts/module-graph` lists each \
             file's edges): move the shared piece down into a module both use, or the composite \
             up into one that names both"
        );
    }
}

/// The file graph's parser on a crate made for it, with one known circle of three files
/// closed through a `use` group (`{b::{self, B}}`), a re-export at the crate root and an
/// inline test module's `super::super::super`; the paths in a comment and a string and the
/// parent -> child re-export do not count.
#[test]
fn the_module_graph_finds_a_known_lateral_circle() {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        (
            "Cargo.toml",
            "[package]\nname = \"knot\"\nversion = \"0.1.0\"\n",
        ),
        (
            "src/lib.rs",
            "mod a;\nmod b;\nmod c;\nmod e;\npub use c::d::Deep;\n",
        ),
        (
            "src/a.rs",
            "use crate::{b::{self, B}, e::e};\npub struct A;\npub fn a() -> B { e(); b::make() }\n",
        ),
        (
            "src/b.rs",
            "pub struct B;\npub fn make() -> B { let _ = crate::Deep; B }\n",
        ),
        ("src/c/mod.rs", "pub mod d;\npub use d::Deep;\n"),
        (
            "src/c/d.rs",
            "pub struct Deep;\n#[cfg(test)]\nmod tests {\n    use super::super::super::a::A;\n}\n",
        ),
        (
            "src/e.rs",
            "/* crate::a::A */\n// crate::b::B\nconst S: &str = \"crate::a::A\";\npub fn e() {}\n",
        ),
    ];
    for (path, text) in files {
        let path = dir.path().join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }
    let report = module_graph(dir.path());
    let krate = &report["crates"][0];
    assert_eq!(
        krate["file_edges"]["a"],
        serde_json::json!(["b", "e"]),
        "{krate}"
    );
    assert_eq!(
        krate["file_edges"]["b"],
        serde_json::json!(["c::d"]),
        "{krate}"
    );
    assert_eq!(krate["file_edges"]["e"], serde_json::json!([]), "{krate}");
    assert_eq!(
        krate["file_cycles"],
        serde_json::json!([["a", "b", "c::d"]]),
        "{krate}"
    );
}
