//! Whether a program a test needs is installed; when it is not, the test says loudly that it
//! did not run.

use std::process::Command;

/// Whether `program --version` runs; when not, prints that `test` (which needs it) did not run.
pub fn program_here(program: &str, test: &str) -> bool {
    let here = Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !here {
        eprintln!("SKIPPED: `{program}` is not installed; {test} did not run");
    }
    here
}
