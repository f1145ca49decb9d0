//! What is generated from the clap definitions: `dsv completions` (shell completion scripts),
//! `dsv man` (man pages) and `dsv __reference` (the generated blocks of `docs/cli.md`, which
//! a test compares with the file; intercepted before parsing in `cli::main`).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, CommandFactory};

use crate::{Cli, error, ui::Ui};

#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// The directory to write the pages into, e.g. /usr/local/share/man/man1.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

/// The command tree as the man pages and the reference see it: built (bin names, propagated
/// global options), without clap's `help` subcommand (`--help` says the same).
fn command_tree() -> clap::Command {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    cmd
}

pub(crate) fn completions(args: &CompletionsArgs) -> anyhow::Result<u8> {
    // Rendered first: clap_complete panics on a failed write, and a closed pipe is no bug.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "dsv", &mut script);
    let mut out = std::io::stdout().lock();
    out.write_all(&script)?;
    out.flush()?;
    Ok(error::SUCCESS)
}

/// What `dsv man` wrote.
#[derive(Debug, serde::Serialize)]
struct ManReport {
    /// The directory.
    dir: PathBuf,
    /// The pages written, in command order.
    pages: Vec<PathBuf>,
}

pub(crate) fn man(ui: &Ui, args: &ManArgs) -> anyhow::Result<u8> {
    let dir = &args.out;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut pages = Vec::new();
    write_pages(&command_tree(), dir, &mut pages)
        .with_context(|| format!("cannot write man pages into {}", dir.display()))?;
    let report = ManReport {
        dir: dir.clone(),
        pages,
    };
    ui.report(&report, |r| {
        format!(
            "Wrote {} man pages to {} (dsv.1, dsv-COMMAND.1)",
            r.pages.len(),
            r.dir.display()
        )
    })?;
    Ok(error::SUCCESS)
}

/// Writes `cmd`'s page and those of its visible subcommands, depth first.
fn write_pages(cmd: &clap::Command, dir: &Path, pages: &mut Vec<PathBuf>) -> std::io::Result<()> {
    pages.push(clap_mangen::Man::new(cmd.clone()).generate_to(dir)?);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir, pages)?;
    }
    Ok(())
}

pub(crate) fn reference() -> anyhow::Result<u8> {
    let mut out = std::io::stdout().lock();
    out.write_all(render_reference().as_bytes())?;
    out.flush()?;
    Ok(error::SUCCESS)
}

/// Every generated block of docs/cli.md, one per visible command (the root `dsv` first,
/// then depth first), each between `<!-- BEGIN GENERATED: dsv ... -->` and
/// `<!-- END GENERATED -->`.
fn render_reference() -> String {
    let root = command_tree();
    let mut out = String::new();
    render_command(&root, &[], &mut out);
    out
}

fn render_command(cmd: &clap::Command, parents: &[&str], out: &mut String) {
    let mut path: Vec<&str> = parents.to_vec();
    path.push(cmd.get_name());
    let name = path.join(" ");
    let is_root = parents.is_empty();
    out.push_str(&format!("<!-- BEGIN GENERATED: {name} -->\n"));
    if !is_root {
        out.push_str(&format!("### `{name}`\n\n"));
    }
    let usage = cmd.clone().render_usage().to_string();
    let usage = usage.trim().trim_start_matches("Usage:").trim();
    out.push_str(&format!("```text\n{usage}\n```\n\n"));
    let about = cmd.get_long_about().or(cmd.get_about());
    if let Some(about) = about {
        render_text(&about.to_string(), out);
    }
    if let Some(after) = cmd.get_after_long_help().or(cmd.get_after_help()) {
        render_text(&after.to_string(), out);
    }
    let args: Vec<&clap::Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter(|a| is_root || !(a.is_global_set() || is_help_or_version(a)))
        .collect();
    if !args.is_empty() {
        out.push_str("| argument / flag | help text |\n| --- | --- |\n");
        for arg in args {
            out.push_str(&format!(
                "| {} | {} |\n",
                arg_name(arg),
                escape(&arg_help(arg))
            ));
        }
        out.push('\n');
    }
    let subcommands: Vec<&clap::Command> =
        cmd.get_subcommands().filter(|s| !s.is_hide_set()).collect();
    if !is_root && !subcommands.is_empty() {
        out.push_str("| command | what it does |\n| --- | --- |\n");
        for sub in &subcommands {
            let sub_name = format!("{name} {}", sub.get_name());
            let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
            out.push_str(&format!(
                "| [`{sub_name}`](#{}) | {} |\n",
                sub_name.replace(' ', "-"),
                escape(&one_line(&about))
            ));
        }
        out.push('\n');
    }
    out.push_str("<!-- END GENERATED -->\n");
    for sub in subcommands {
        render_command(sub, &path, out);
    }
}

fn is_help_or_version(arg: &clap::Arg) -> bool {
    matches!(
        arg.get_action(),
        clap::ArgAction::Help
            | clap::ArgAction::HelpShort
            | clap::ArgAction::HelpLong
            | clap::ArgAction::Version
    )
}

/// How an argument is written: `<DIR>`, `[DIR]`, `<REVISION>...`, `-d`, `--dataset <DATASET>`.
fn arg_name(arg: &clap::Arg) -> String {
    let value = || {
        let names: Vec<String> = match arg.get_value_names() {
            Some(names) => names.iter().map(ToString::to_string).collect(),
            None => vec![arg.get_id().as_str().to_uppercase()],
        };
        names.join(" ")
    };
    let repeated = matches!(arg.get_action(), clap::ArgAction::Append);
    if arg.is_positional() {
        let (open, close) = if arg.is_required_set() {
            ('<', '>')
        } else {
            ('[', ']')
        };
        let dots = if repeated { "..." } else { "" };
        return format!("`{open}{}{close}{dots}`", value());
    }
    let mut names = Vec::new();
    if let Some(short) = arg.get_short() {
        names.push(format!("`-{short}`"));
    }
    if let Some(long) = arg.get_long() {
        if arg.get_action().takes_values() {
            names.push(format!("`--{long} <{}>`", value()));
        } else {
            names.push(format!("`--{long}`"));
        }
    }
    names.join(", ")
}

/// The argument's help text on one line, with its default, environment variable and
/// possible values as `--help` shows them.
fn arg_help(arg: &clap::Arg) -> String {
    let help = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let mut text = one_line(&help);
    if arg.get_action().takes_values() && !arg.is_hide_default_value_set() {
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| {
                let v = v.to_string_lossy();
                if v.is_empty() {
                    "\"\"".to_string()
                } else {
                    v.into_owned()
                }
            })
            .collect();
        if !defaults.is_empty() {
            text.push_str(&format!(" [default: {}]", defaults.join(", ")));
        }
    }
    if let Some(env) = arg.get_env()
        && !arg.is_hide_env_set()
    {
        text.push_str(&format!(" [env: {}]", env.to_string_lossy()));
    }
    let values: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| v.get_name().to_string())
        .collect();
    if !values.is_empty() && !arg.is_hide_possible_values_set() && arg.get_action().takes_values() {
        text.push_str(&format!(" [possible values: {}]", values.join(", ")));
    }
    text.trim().to_string()
}

/// Collapses a (multi-paragraph) help text into one line, for a table cell.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A command's about text: its paragraphs as a quote, an `Examples:` paragraph (an
/// indented list of invocations) as a code block.
fn render_text(text: &str, out: &mut String) {
    for paragraph in text.trim().split("\n\n") {
        let lines: Vec<&str> = paragraph.lines().collect();
        let Some((first, rest)) = lines.split_first() else {
            continue;
        };
        let indented = |l: &&str| l.starts_with(' ') || l.trim().is_empty();
        if first.trim_end().ends_with(':') && !rest.is_empty() && rest.iter().all(indented) {
            let indent = rest
                .iter()
                .filter(|l| !l.trim().is_empty())
                .map(|l| l.len() - l.trim_start().len())
                .min()
                .unwrap_or(0);
            out.push_str(&format!("{}\n\n```text\n", escape(first.trim())));
            for line in rest {
                out.push_str(line.get(indent..).unwrap_or("").trim_end());
                out.push('\n');
            }
            out.push_str("```\n\n");
        } else {
            for line in lines {
                out.push_str(&format!("> {}\n", escape(line.trim())));
            }
            out.push('\n');
        }
    }
}

/// Escapes what Markdown would otherwise read as markup (`<`, `*`, and `|` in tables) outside
/// code spans; inside them, only `|`.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_code = false;
    for c in text.chars() {
        match c {
            '`' => {
                in_code = !in_code;
                out.push(c);
            }
            '|' => out.push_str("\\|"),
            '<' | '*' if !in_code => {
                out.push('\\');
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}
