//! Printing to standard output without panicking when it is closed.
//!
//! Rust ignores `SIGPIPE`, so a write to a closed pipe (`benchlake agents
//! list --json | head`) fails with `BrokenPipe` instead of ending the process,
//! and `println!` panics on that failure (a backtrace on the terminal, exit
//! status 101). The binaries keep `SIGPIPE` ignored — their services, and the
//! user commands' gRPC connections, must see a closed socket or pipe as an
//! error, not die of it — and print through [`out!`](crate::out) and
//! [`outln!`](crate::outln) (the crates that print warn on `clippy::print_stdout`,
//! an error under the project's `clippy -D warnings`):
//! when the reader has gone, the process ends as a C program's would, killed
//! by `SIGPIPE` (status 141 in a shell), without a word; another write error
//! (a full disk) is printed and ends it with status 1.
use std::io::Write;

/// Writes `args` to standard output; see the module's documentation for a
/// write that fails.
pub fn print(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args) {
        failed(&e)
    }
}

/// Ends the process after a failed write to standard output: quietly when
/// the reader has gone ([`closed`]), else with the error and status 1.
pub fn failed(e: &std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        closed()
    }
    let _ = writeln!(std::io::stderr(), "error: writing to standard output: {e}");
    std::process::exit(1)
}

/// Ends the process because the reader of its standard output has gone:
/// killed by `SIGPIPE`, as a program that does not ignore it would be (a
/// shell sees status 141; `set -o pipefail` sees the cut), with nothing
/// printed.
pub fn closed() -> ! {
    #[cfg(unix)]
    {
        // SAFETY: restoring the default disposition of one signal and
        // raising it in this thread; no handler of ours runs.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            libc::raise(libc::SIGPIPE);
        }
    }
    std::process::exit(141)
}

/// `print!` that does not panic on a closed standard output ([`print`]).
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::stdout::print(::std::format_args!($($arg)*))
    };
}

/// `println!` that does not panic on a closed standard output ([`print`]).
#[macro_export]
macro_rules! outln {
    () => {
        $crate::stdout::print(::std::format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::stdout::print(::std::format_args!("{}\n", ::std::format_args!($($arg)*)))
    };
}
