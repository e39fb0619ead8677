//! How many threads an offline command uses when nobody says: one rule for
//! every command that has a `--threads` flag and an environment variable.

/// The positive number in the environment variable `var`, else the cores
/// available to the process (at least 1). A value that is not a positive
/// number counts as unset.
pub fn from_env(var: &str) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(available)
}

/// The cores available to the process, at least 1.
pub fn available() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_positive_number_in_the_variable_wins() {
        // A variable no other test reads: tests run in threads of one process.
        const VAR: &str = "BENCHLAKE_TEST_THREADS_FROM_ENV";
        // SAFETY: only this test touches this variable.
        unsafe { std::env::set_var(VAR, " 3 ") };
        assert_eq!(super::from_env(VAR), 3);
        for bad in ["0", "-2", "many", ""] {
            unsafe { std::env::set_var(VAR, bad) };
            assert_eq!(super::from_env(VAR), super::available(), "{bad:?}");
        }
        unsafe { std::env::remove_var(VAR) };
        assert_eq!(super::from_env(VAR), super::available());
        assert!(super::available() >= 1);
    }
}
