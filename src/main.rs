//! The `ctxbridge` binary; the command line lives in [`ctxbridge::cli`].

fn main() -> std::process::ExitCode {
    ctxbridge::cli::main()
}
