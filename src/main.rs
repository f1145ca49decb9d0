//! The `dsv` command line. Parsing, printing and exit codes live in [`cli`]; the work is
//! done by the `dsv` library.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
