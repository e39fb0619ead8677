//! The process's limit on open files: raised to its hard limit at start, read
//! back for error messages, and "too many open files" told apart from other
//! I/O errors.
//!
//! Why: a Bandela trace is one text file per rank, and the replay reads them
//! side by side, so it holds one open file per rank. Many systems start
//! processes with a soft limit of 1,024 open files (and a hard limit far
//! above it), so a 1,024-rank trace failed on its 1,013th file. Raising the
//! soft limit up to the hard one is what the hard limit allows every process
//! to do; it needs no privilege.

/// The soft and hard limits on open files (`None` for a limit that is not
/// set, i.e. unlimited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFiles {
    /// The limit in force.
    pub soft: Option<u64>,
    /// How far the process may raise it.
    pub hard: Option<u64>,
}

impl std::fmt::Display for OpenFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: Option<u64>| v.map_or("unlimited".to_string(), |v| v.to_string());
        write!(
            f,
            "{} open files (`ulimit -n`; hard limit {})",
            show(self.soft),
            show(self.hard)
        )
    }
}

/// The current limits on open files; `None` where they cannot be read.
pub fn open_files() -> Option<OpenFiles> {
    #[cfg(unix)]
    {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct it is given and nothing else.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } != 0 {
            return None;
        }
        // rlim_t is u64 on Linux, not on every Unix.
        #[allow(clippy::unnecessary_cast)]
        let v = |x: libc::rlim_t| (x != libc::RLIM_INFINITY).then_some(x as u64);
        Some(OpenFiles {
            soft: v(l.rlim_cur),
            hard: v(l.rlim_max),
        })
    }
    #[cfg(not(unix))]
    None
}

/// Raises the soft limit on open files to the hard limit (where the soft one
/// is lower) and returns the limits in force afterwards. A refusal leaves the
/// limits as they were.
pub fn raise_open_files() -> Option<OpenFiles> {
    let before = open_files()?;
    #[cfg(unix)]
    if before.soft.is_some() && before.soft < before.hard.or(Some(u64::MAX)) {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: as in `open_files`.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } == 0 {
            l.rlim_cur = l.rlim_max;
            // SAFETY: setrlimit reads the struct; a soft limit equal to the
            // hard one is always allowed, and a refusal changes nothing.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) } != 0 {
                // macOS refuses RLIM_INFINITY for open files: its kernel's
                // maximum is the highest value it takes.
                #[cfg(target_os = "macos")]
                {
                    l.rlim_cur = libc::OPEN_MAX as libc::rlim_t;
                    // SAFETY: as above.
                    let _ = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) };
                }
                tracing::debug!(limits = %before, "could not raise the open-files limit");
            }
        }
    }
    open_files()
}

/// Whether `e` says the process (or the system) has too many files open.
pub fn is_too_many_open_files(e: &std::io::Error) -> bool {
    #[cfg(unix)]
    {
        matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
    }
    #[cfg(not(unix))]
    {
        let _ = e;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The soft limit ends at the hard one, never above or below where it was.
    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let Some(before) = open_files() else {
            return;
        };
        let after = raise_open_files().expect("limits readable");
        assert_eq!(after.hard, before.hard);
        assert!(after.soft.unwrap_or(u64::MAX) >= before.soft.unwrap_or(u64::MAX));
        if cfg!(target_os = "linux") {
            assert_eq!(after.soft, after.hard, "{after}");
        }
        let text = after.to_string();
        assert!(
            text.contains("open files (`ulimit -n`; hard limit"),
            "{text}"
        );
    }

    #[test]
    fn too_many_open_files_is_told_apart() {
        assert!(is_too_many_open_files(&std::io::Error::from_raw_os_error(
            libc::EMFILE
        )));
        assert!(!is_too_many_open_files(&std::io::Error::from_raw_os_error(
            libc::ENOENT
        )));
    }
}
