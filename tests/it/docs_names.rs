//! The code the docs name exists: every path, type, function, source file and test that
//! docs/architecture.md, a library module's rustdoc header (`//!`) or a user's guide
//! (docs/cli.md, format.md, python.md, scale.md, README.md: paths and files only) names
//! between backticks is found in the sources, where the name says it is. A moved module, a renamed type or a
//! deleted test fails here instead of leaving a map that points nowhere.
//!
//! What counts as a name (anything else between backticks is prose: flags, values, keys):
//! - a source path: `crates/...`, `src/...`, `python/...`, `tests/...`, `scripts/...`, `fuzz/...`
//!   (a `:line` or `#anchor` after it is left out): the file or directory exists;
//! - a Rust path `a::b::c` (an optional leading `crate::`, `dsv::` or `dsv_store::`-style crate
//!   name left out; `a::{b, c}` is `a::b` and `a::c`): its longest prefix that is a module of
//!   some crate (tests/it's modules included, so a cited test is checked too) names that
//!   module's file, and the rest is an item defined in it, in a file beneath it, or
//!   re-exported by it (`pub use`); a prefix that is a type (`Store::find_root`) needs the type
//!   and the function in the same crate;
//! - a CamelCase word of two or more humps (`CheckoutPlan`): a type, trait or enum variant
//!   defined in the sources.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One crate's sources: module path (`["ops", "sync", "copy"]`) -> its file and the names
/// the file defines ([`defined_names`]).
struct Crate {
    name: String,
    modules: BTreeMap<Vec<String>, (PathBuf, String, BTreeSet<String>)>,
}

/// The module path of `file` under `src`: `ops/sync/copy.rs` and `ops/sync/copy/mod.rs` are
/// `ops::sync::copy`; `lib.rs`, `main.rs` and `mod.rs` are their directory's module.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "lib" | "main" | "mod") {
        parts.push(stem.to_string());
    }
    parts
}

fn load_crate(name: &str, src: &Path) -> Crate {
    let mut modules = BTreeMap::new();
    for entry in walkdir::WalkDir::new(src)
        .into_iter()
        .filter_map(|e| e.ok())
    {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "rs")
            && !path.components().any(|c| c.as_os_str() == "snapshots")
        {
            let text = fs::read_to_string(path).unwrap();
            let names = defined_names(&text);
            modules.insert(module_path(src, path), (path.to_path_buf(), text, names));
        }
    }
    Crate {
        name: name.to_string(),
        modules,
    }
}

/// The library crates, the CLI, the Python extension and the `it` test modules.
fn crates() -> Vec<Crate> {
    let root = repo();
    let mut found = vec![
        load_crate("dsv_cli", &root.join("src")),
        load_crate("dsv_python", &root.join("python/src")),
        load_crate("it", &root.join("tests/it")),
    ];
    for entry in fs::read_dir(root.join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().replace('-', "_");
        found.push(load_crate(&name, &dir.join("src")));
    }
    found
}

/// The names `text` defines: items (`fn`, `struct`, `enum`, `trait`, `type`, `const`,
/// `static`, `mod`, `macro_rules!`), enum variants and fields (a name at the start of a line
/// followed by `{`, `(`, `,` or `:`), and every name a `pub use` brings in.
fn defined_names(text: &str) -> BTreeSet<String> {
    let item = regex::Regex::new(
        r"(?m)\b(?:fn|struct|enum|trait|type|const|static|mod)\s+([A-Za-z_][A-Za-z0-9_]*)|macro_rules!\s*([A-Za-z_][A-Za-z0-9_]*)|^\s*(?:pub(?:\([^)]*\))?\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*[\{\(,:]",
    )
    .unwrap();
    let pub_use = regex::Regex::new(r"(?m)^\s*pub(?:\([^)]*\))?\s+use\s([^;]*);").unwrap();
    let word = regex::Regex::new(r"[A-Za-z_][A-Za-z0-9_]*").unwrap();
    let mut names = BTreeSet::new();
    for found in item.captures_iter(text) {
        let name = found.get(1).or(found.get(2)).or(found.get(3)).unwrap();
        names.insert(name.as_str().to_string());
    }
    for found in pub_use.captures_iter(text) {
        names.extend(word.find_iter(&found[1]).map(|w| w.as_str().to_string()));
    }
    names
}

/// Whether a file of `krate` at or beneath module `prefix` defines `name`.
fn defined_beneath(krate: &Crate, prefix: &[String], name: &str) -> bool {
    krate
        .modules
        .iter()
        .any(|(path, (_, _, names))| path.starts_with(prefix) && names.contains(name))
}

/// Whether some file of `krate` defines `name`.
fn defined_in(krate: &Crate, name: &str) -> bool {
    defined_beneath(krate, &[], name)
}

const CRATE_PREFIXES: &[&str] = &[
    "crate",
    "dsv",
    "dsv_format",
    "dsv_store",
    "dsv_remote",
    "dsv_mount",
    "dsv_cli",
];

/// Why `segments`, a path resolved through a module prefix, names nothing (`None` when it
/// names something, or when no prefix of it is a module of ours).
fn module_problem(crates: &[Crate], segments: &[String], from: usize) -> Option<Option<String>> {
    for split in (from.max(1)..=segments.len()).rev() {
        let (module, rest) = segments.split_at(split);
        let holders: Vec<&Crate> = crates
            .iter()
            .filter(|c| c.modules.contains_key(module))
            .collect();
        if holders.is_empty() {
            continue;
        }
        let found = holders.iter().any(|krate| match rest {
            [] => true,
            [item] => defined_beneath(krate, module, item),
            [ty, item] => defined_beneath(krate, module, ty) && defined_in(krate, item),
            _ => false,
        });
        return Some((!found).then(|| {
            format!(
                "`{}`: module `{}` has no `{}`",
                segments.join("::"),
                module.join("::"),
                rest.join("::")
            )
        }));
    }
    None
}

/// Why the Rust path `segments`, written in the docs of module `here`, names nothing; `None`
/// when it names something, or when it is another crate's path (its first segment is
/// neither a module nor a type of ours: `blake3::hazmat`, `std::fs`).
fn path_problem(crates: &[Crate], here: &[String], segments: &[String]) -> Option<String> {
    let mut segments = segments.to_vec();
    while segments.len() > 1 && CRATE_PREFIXES.contains(&segments[0].as_str()) {
        segments.remove(0);
    }
    let mut base = here.to_vec();
    let mut relative = false;
    while matches!(segments.first().map(String::as_str), Some("self" | "super")) {
        if segments.remove(0) == "super" {
            base.pop();
        }
        relative = true;
    }
    // Written from `here` (a child module, `super::`, `self::`), or from a crate's root.
    // (A relative path must reach past `here`: its first segment is a module beneath it.)
    let mut candidates = vec![(
        [base.clone(), segments.clone()].concat(),
        base.len() + usize::from(!relative),
    )];
    if !relative {
        candidates.push((segments.clone(), 1));
    }
    let mut problem = None;
    for (candidate, from) in &candidates {
        match module_problem(crates, candidate, *from) {
            Some(None) => return None,
            Some(Some(found)) => problem = Some(found),
            None => {}
        }
    }
    if problem.is_some() {
        return problem;
    }
    // No module prefix: `Type::item` (or `Type::Variant`), both defined in one crate of ours.
    match segments.as_slice() {
        [name] if !crates.iter().any(|krate| defined_in(krate, name)) => {
            Some(format!("`{name}`: defined nowhere"))
        }
        [ty, item] if crates.iter().any(|krate| defined_in(krate, ty)) => {
            let found = crates
                .iter()
                .any(|krate| defined_in(krate, ty) && defined_in(krate, item));
            (!found).then(|| format!("`{ty}::{item}`: no type `{ty}` with `{item}`"))
        }
        _ => None,
    }
}

/// `a::{b, c::d}` as `[a::b, a::c::d]`; anything else as itself.
fn expand_braces(path: &str) -> Vec<String> {
    match (path.find('{'), path.rfind('}')) {
        (Some(open), Some(close)) if open < close => path[open + 1..close]
            .split(',')
            .map(|part| format!("{}{}", &path[..open], part.trim()))
            .collect(),
        _ => vec![path.to_string()],
    }
}

/// What in `text` (between backticks) names nothing.
fn problems_in(
    crates: &[Crate],
    here: &[String],
    text: &str,
    source: &str,
    types_too: bool,
) -> Vec<String> {
    let rust_path = regex::Regex::new(
        r"^[A-Za-z_][A-Za-z0-9_]*(::(\{[A-Za-z0-9_, :]+\}|[A-Za-z_][A-Za-z0-9_]*))+(\(\))?$",
    )
    .unwrap();
    let camel = regex::Regex::new(r"^[A-Z][a-z0-9]+([A-Z][a-z0-9]*)+$").unwrap();
    let file =
        regex::Regex::new(r"^(crates|src|python|tests|scripts|fuzz)/[A-Za-z0-9_./-]+$").unwrap();
    let mut problems = Vec::new();
    for ticked in text.split('`').skip(1).step_by(2) {
        let ticked = ticked.trim();
        if file.is_match(ticked) {
            let path = ticked.split(['#', ':']).next().unwrap();
            if path.contains('<') || path.contains('*') {
                continue;
            }
            if !repo().join(path).exists() {
                problems.push(format!("{source}: `{ticked}`: no such file"));
            }
        } else if rust_path.is_match(ticked) {
            for path in expand_braces(ticked.trim_end_matches("()")) {
                let segments: Vec<String> = path.split("::").map(str::to_string).collect();
                if let Some(problem) = path_problem(crates, here, &segments) {
                    problems.push(format!("{source}: {problem}"));
                }
            }
        } else if types_too
            && camel.is_match(ticked)
            && !crates.iter().any(|c| defined_in(c, ticked))
        {
            problems.push(format!("{source}: `{ticked}`: no such type or variant"));
        }
    }
    problems
}

/// The `//!` lines of a source file, joined.
fn module_doc(text: &str) -> String {
    text.lines()
        .map(str::trim_start)
        .filter_map(|line| line.strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_name_the_architecture_map_gives_exists() {
    let crates = crates();
    let doc = fs::read_to_string(repo().join("docs/architecture.md")).unwrap();
    let problems = problems_in(&crates, &[], &doc, "docs/architecture.md", true);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The user's guides name the code too (where a behaviour is implemented, which type a
/// report is): each name there is checked as the map's are, but for plain type words.
#[test]
fn every_code_path_the_guides_give_exists() {
    let crates = crates();
    let mut problems = Vec::new();
    for doc in [
        "docs/cli.md",
        "docs/format.md",
        "docs/python.md",
        "docs/scale.md",
        "README.md",
    ] {
        let text = fs::read_to_string(repo().join(doc)).unwrap();
        problems.extend(problems_in(&crates, &[], &text, doc, false));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_name_a_library_modules_rustdoc_gives_exists() {
    let crates = crates();
    let mut problems = Vec::new();
    for krate in crates
        .iter()
        .filter(|c| c.name.starts_with("dsv") && c.name != "dsv_cli" && c.name != "dsv_python")
    {
        for (here, (path, text, _)) in &krate.modules {
            let source = path.strip_prefix(repo()).unwrap().display().to_string();
            problems.extend(problems_in(
                &crates,
                here,
                &module_doc(text),
                &source,
                false,
            ));
        }
    }
    let unique: BTreeSet<String> = problems.into_iter().collect();
    assert!(
        unique.is_empty(),
        "{}",
        unique.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// The check finds what is missing: a moved module, a renamed type, a deleted test, a file
/// that is not there, and passes what is there.
#[test]
fn the_name_check_catches_names_that_point_nowhere() {
    let crates = crates();
    let good = "`ops::gc::plan`, `std::fs::File`, `blake3::hazmat::merge_subtrees_root`, `Store::find_root`, `GcPlan`, `crates/dsv/src/ops/gc.rs:10`, \
                `dsv_store::store::Store`, `ops::sync::{push, fetch}`, `architecture_docs::the_layer_table_is_the_workspaces_crates`, \
                `--dry-run`, `Last-Modified`, `a b`";
    assert_eq!(
        problems_in(&crates, &[], good, "good", true),
        Vec::<String>::new()
    );
    for bad in [
        "`ops::gc::no_such_function`",
        "`ops::no_such_module::plan`",
        "`Store::no_such_method`",
        "`NoSuchPlanType`",
        "`crates/dsv/src/ops/no_such_file.rs`",
        "`architecture_docs::no_such_test`",
        "`ops::sync::{push, no_such_step}`",
    ] {
        assert_eq!(
            problems_in(&crates, &[], bad, "bad", true).len(),
            1,
            "{bad} should be one problem"
        );
    }
}
