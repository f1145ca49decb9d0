//! The `dsv` command line: [`dsv::cli`] parses, prints and picks the exit code; the work is
//! done by the `dsv` library.

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(dsv::cli::run(std::env::args_os()))
}
