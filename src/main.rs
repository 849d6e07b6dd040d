//! The `elfiee` command-line interface: [`elfiee::cli::main`]. See docs/CLI.md.

fn main() -> std::process::ExitCode {
    elfiee::cli::main()
}
