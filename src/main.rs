//! The `mutantops` binary: parse arguments, then hand over to the library.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use mutantops::cli::{self, Command};

/// The binary allocates with dlmalloc, not musl's mallocng, which kept half as much memory
/// again after a relist at scale, nor glibc's malloc, whose per-thread arenas each keep what
/// the watches' list pages and the reconciles freed (see Cargo.toml). The `system-allocator`
/// feature leaves the system's malloc in place, for heap profilers (scripts/bench).
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

fn main() -> ExitCode {
    let command = match cli::parse(std::env::args_os().skip(1)) {
        Ok(command) => command,
        Err(message) => {
            eprintln!("mutantops: {message}\n\n{}", cli::USAGE);
            return ExitCode::from(2);
        }
    };
    match command {
        Command::Help => {
            println!("{}", cli::USAGE);
            ExitCode::SUCCESS
        }
        Command::Version => {
            println!("mutantops {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        other => match cli::run(other) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("mutantops: {}", mutantops::error_chain(&err));
                ExitCode::FAILURE
            }
        },
    }
}
