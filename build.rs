//! Records what `dsv --version` names besides the package version: the git commit the source
//! was built from (`DSV_COMMIT`, 12 hex digits, `unknown` outside a git checkout or without
//! git) and the build's UTC date (`DSV_BUILD_DATE`, `YYYY-MM-DD`; `SOURCE_DATE_EPOCH`, when
//! set, gives it for reproducible builds).

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// The proleptic Gregorian date of `days` since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, <https://howardhinnant.github.io/date_algorithms.html>).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn main() {
    println!("cargo::rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    // Built again when HEAD moves: HEAD itself, the branch file it names, and packed refs
    // (only files that exist: a missing one would make cargo run this script every build).
    let branch = git(&["symbolic-ref", "-q", "HEAD"]);
    // `logs/HEAD` grows with every commit and checkout, whichever way the refs are stored.
    for name in ["HEAD", "logs/HEAD", "packed-refs"]
        .into_iter()
        .chain(branch.as_deref())
    {
        if let Some(path) = git(&["rev-parse", "--git-path", name])
            && std::path::Path::new(&path).exists()
        {
            println!("cargo::rerun-if-changed={path}");
        }
    }
    let seconds = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64)
        });
    let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
    println!("cargo::rustc-env=DSV_COMMIT={commit}");
    println!("cargo::rustc-env=DSV_BUILD_DATE={year:04}-{month:02}-{day:02}");
}
