//! The process's limit on open files: raised where a task needs more, read
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

/// The raw limits on open files.
#[cfg(unix)]
fn rlimit() -> Option<libc::rlimit> {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given and nothing else.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } == 0).then_some(l)
}

/// The current limits on open files; `None` where they cannot be read.
pub fn open_files() -> Option<OpenFiles> {
    #[cfg(unix)]
    {
        let l = rlimit()?;
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

/// Makes sure this process may have `needed` files open: raises the soft
/// limit to `needed` (at most to the hard limit) where it is lower, and
/// returns the limits in force afterwards. Only as far as needed, because
/// child processes inherit the limit (and some programs loop over every
/// possible file descriptor). A refusal leaves the limits as they were.
pub fn ensure_open_files(needed: u64) -> Option<OpenFiles> {
    #[cfg(unix)]
    {
        let mut l = rlimit()?;
        let want = libc::rlim_t::try_from(needed).unwrap_or(libc::RLIM_INFINITY);
        if l.rlim_cur != libc::RLIM_INFINITY && l.rlim_cur < want {
            l.rlim_cur = if l.rlim_max == libc::RLIM_INFINITY {
                want
            } else {
                want.min(l.rlim_max)
            };
            // SAFETY: setrlimit reads the struct; a soft limit at or under the
            // hard one is always allowed, and a refusal changes nothing.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) } != 0 {
                tracing::debug!(needed, "could not raise the open-files limit");
            }
        }
    }
    #[cfg(not(unix))]
    let _ = needed;
    open_files()
}

/// Files this process has open now (`None` where that cannot be counted).
pub fn open_now() -> Option<u64> {
    let n = std::fs::read_dir("/proc/self/fd").ok()?.count();
    // The directory handle read_dir held is one of them.
    Some((n as u64).saturating_sub(1))
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

    /// The soft limit rises to what is asked (never past the hard limit,
    /// never down), and a count of open files is there on Linux.
    #[test]
    fn the_soft_limit_rises_only_as_far_as_asked() {
        let Some(before) = open_files() else {
            return;
        };
        let after = ensure_open_files(1).expect("limits readable");
        assert_eq!(after, before, "already allowed: nothing changes");
        if let (Some(soft), Some(hard)) = (before.soft, before.hard)
            && soft < hard
        {
            let after = ensure_open_files(soft + 1).expect("limits readable");
            assert_eq!(after.soft, Some(soft + 1));
            assert_eq!(after.hard, before.hard);
            let after = ensure_open_files(u64::MAX).expect("limits readable");
            assert_eq!(after.soft, after.hard, "capped at the hard limit");
        }
        let text = before.to_string();
        assert!(
            text.contains("open files (`ulimit -n`; hard limit"),
            "{text}"
        );
        if cfg!(target_os = "linux") {
            assert!(
                open_now().expect("/proc/self/fd") >= 3,
                "stdin, stdout, stderr"
            );
        }
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
