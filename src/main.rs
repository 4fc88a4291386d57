//! The `ctxbridge` binary; the command line lives in [`ctxbridge::cli`].

use mimalloc::MiMalloc;

/// The allocator of the binary (the library leaves the choice to its users).
#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

fn main() -> std::process::ExitCode {
    ctxbridge::cli::main()
}
