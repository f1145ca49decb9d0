//! The `dsv` command line: [`dsv_cli`] parses, prints and picks the exit code; the work is
//! done by the `dsv` library.

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(dsv_cli::run(std::env::args_os()))
}
