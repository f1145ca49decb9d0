//! Turning library errors into messages, hints and exit codes (table in `docs/cli.md`).

use dsv::{Error, ErrorKind};

/// Exit code: success.
pub const SUCCESS: u8 = 0;
/// Exit code: `status`/`diff --exit-code` found differences.
pub const DIFFERENCES: u8 = 1;
/// Exit code: bad command-line usage (clap's own).
pub const USAGE: u8 = 2;
/// Exit code: the user named something that does not exist or gave invalid input.
pub const USER: u8 = 3;
/// Exit code: uncommitted changes are in the way.
pub const CONFLICT: u8 = 4;
/// Exit code: stored data failed a check.
pub const CORRUPT: u8 = 5;
/// Exit code: the operating system refused (disk full, permissions).
pub const IO: u8 = 6;
/// Exit code: a bug in dsv (sysexits' EX_SOFTWARE).
pub const INTERNAL: u8 = 70;
/// Exit code: interrupted by Ctrl-C.
pub const INTERRUPTED: u8 = 130;

/// A command line clap accepts but whose arguments do not go together (exit 2, as clap's own).
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// The exit code of an error kind (every kind listed: a new one does not compile until it
/// has a code).
pub fn kind_exit_code(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::User => USER,
        ErrorKind::Conflict => CONFLICT,
        ErrorKind::Corrupt => CORRUPT,
        ErrorKind::Io => IO,
        ErrorKind::Interrupted => INTERRUPTED,
        ErrorKind::Internal => INTERNAL,
    }
}

/// The kind of an error that is no [`Error`] (nor [`Usage`]): an I/O error anywhere in the
/// chain (also inside a JSON writer's error: a full disk while printing `--json`) is the
/// operating system's refusal; anything else is the user's.
fn foreign_kind(error: &anyhow::Error) -> ErrorKind {
    if error.chain().any(|e| {
        e.is::<std::io::Error>()
            || e.downcast_ref::<serde_json::Error>()
                .is_some_and(|e| e.io_error_kind().is_some())
    }) {
        ErrorKind::Io
    } else {
        ErrorKind::User
    }
}

/// The exit code of an error.
pub fn exit_code(error: &anyhow::Error) -> u8 {
    if error.is::<Usage>() {
        return USAGE;
    }
    match error.downcast_ref::<Error>() {
        Some(error) => kind_exit_code(error.kind()),
        None => kind_exit_code(foreign_kind(error)),
    }
}

/// A short name of the error's kind for `--json` output ([`ErrorKind::name`], or `"usage"`).
pub fn kind_name(error: &anyhow::Error) -> &'static str {
    if error.is::<Usage>() {
        return "usage";
    }
    match error.downcast_ref::<Error>() {
        Some(error) => error.kind().name(),
        None => foreign_kind(error).name(),
    }
}

/// The error's causes, outermost first, without the error itself ([`dsv::error::causes`]).
pub fn causes(error: &anyhow::Error) -> Vec<String> {
    dsv::error::causes(error.as_ref())
}

/// What the user can do about the error ([`Error::hints`]; none for an error of the CLI's own).
pub fn hints(error: &anyhow::Error) -> Vec<String> {
    error
        .downcast_ref::<Error>()
        .map(Error::hints)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_exit_code_and_name() {
        let mut codes = vec![SUCCESS, DIFFERENCES, USAGE];
        for kind in ErrorKind::ALL {
            let code = kind_exit_code(kind);
            assert!(!codes.contains(&code), "{kind:?} shares exit code {code}");
            codes.push(code);
            let error = anyhow::Error::new(match kind {
                ErrorKind::User => Error::NoRemote,
                ErrorKind::Conflict => Error::HeadMoved {
                    dataset: "d".into(),
                },
                ErrorKind::Corrupt => Error::corrupt("p", "d"),
                ErrorKind::Io => Error::Io {
                    path: "p".into(),
                    source: std::io::Error::other("x"),
                },
                ErrorKind::Interrupted => Error::Interrupted,
                ErrorKind::Internal => Error::Internal { detail: "d".into() },
            });
            assert_eq!(exit_code(&error), code);
            assert_eq!(kind_name(&error), kind.name());
        }
        assert_eq!(exit_code(&anyhow::Error::new(Usage("u".into()))), USAGE);
        assert_eq!(kind_name(&anyhow::Error::new(Usage("u".into()))), "usage");
        let io = anyhow::Error::new(std::io::Error::other("x")).context("writing");
        assert_eq!((exit_code(&io), kind_name(&io)), (IO, "io"));
        let other = anyhow::anyhow!("bad --range");
        assert_eq!((exit_code(&other), kind_name(&other)), (USER, "user"));
    }
}
