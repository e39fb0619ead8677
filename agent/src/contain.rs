//! Who a benchmark runs as and what happens to its processes when they
//! outlive their task or their agent.
//!
//! - **Users.** An agent running as root never executes a benchmark as root
//!   unless the catalog entry (`run_as = "root"`) or the agent's `--run-as root`
//!   says so; otherwise it switches to the entry's `run_as` user (or the
//!   agent's `--run-as` default) before `exec`: supplementary groups dropped,
//!   group then user id set. An unprivileged agent runs benchmarks as itself.
//! - **Containment.** Every task runs in its own process group, with a
//!   parent-death signal (SIGKILL) on its first process, and carries the
//!   variable `BENCHLAKE_AGENT_WORK=<work dir>` that its descendants inherit.
//!   An agent that starts kills every process still carrying its work
//!   directory's mark (what a `kill -9`ed earlier life left running), then
//!   removes the task directories that life left.
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};

use benchlake_core::bench::BenchmarkDef;

/// The variable marking the processes of one agent's tasks.
pub const MARK_VAR: &str = "BENCHLAKE_AGENT_WORK";

/// A user a task switches to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    /// User name.
    pub name: String,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Home directory.
    pub home: PathBuf,
}

/// Looks a user up in the password database.
pub fn lookup_user(name: &str) -> Result<RunAs, String> {
    let c = CString::new(name).map_err(|_| format!("user name '{name}' holds a NUL byte"))?;
    let mut pw: libc::passwd = unsafe_zeroed_passwd();
    let mut buf = vec![0u8; 16 * 1024];
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwnam_r writes into `pw` and `buf` (whose length we pass) and
    // sets `out` to `&pw` on success or NULL; all pointers are valid for the call.
    let rc = unsafe {
        libc::getpwnam_r(
            c.as_ptr(),
            &mut pw,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut out,
        )
    };
    if rc != 0 || out.is_null() {
        return Err(format!("user '{name}' does not exist on this node"));
    }
    // SAFETY: on success pw_dir points into `buf` as a NUL-terminated string.
    let home = if pw.pw_dir.is_null() {
        PathBuf::from("/")
    } else {
        PathBuf::from(
            unsafe { CStr::from_ptr(pw.pw_dir) }
                .to_string_lossy()
                .into_owned(),
        )
    };
    Ok(RunAs {
        name: name.to_string(),
        uid: pw.pw_uid,
        gid: pw.pw_gid,
        home,
    })
}

/// The name of the agent's own user (`root`, or the uid as text when the
/// password database does not know it).
pub fn current_user_name() -> String {
    let uid = euid();
    let mut pw: libc::passwd = unsafe_zeroed_passwd();
    let mut buf = vec![0u8; 16 * 1024];
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: as in lookup_user: valid pointers, `buf.len()` passed.
    let rc =
        unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut out) };
    if rc != 0 || out.is_null() || pw.pw_name.is_null() {
        return uid.to_string();
    }
    // SAFETY: on success pw_name points into `buf`, NUL-terminated.
    unsafe { CStr::from_ptr(pw.pw_name) }
        .to_string_lossy()
        .into_owned()
}

fn unsafe_zeroed_passwd() -> libc::passwd {
    // SAFETY: passwd is a plain C struct of integers and pointers, for which
    // all-zero bytes (null pointers, zero ids) are a valid value.
    unsafe { std::mem::zeroed() }
}

/// The effective user id of the agent.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The user a task of `def` must switch to: None runs it as the agent itself.
/// `default` is the agent's `--run-as`.
pub fn run_as_for(def: &BenchmarkDef, default: Option<&str>) -> Result<Option<RunAs>, String> {
    let want = def.run_as.as_deref().or(default);
    let me = euid();
    match (me, want) {
        (0, None) => Err(format!(
            "refusing to run benchmark '{}' as root: give its catalog entry a `run_as` user, \
             or start the agent with --run-as USER (--run-as root allows root explicitly)",
            def.name
        )),
        (0, Some("root")) => Ok(None),
        (0, Some(u)) => lookup_user(u).map(Some),
        (_, None) => Ok(None),
        (me, Some(u)) => {
            let ra = lookup_user(u)?;
            if ra.uid == me {
                Ok(None)
            } else {
                Err(format!(
                    "cannot run benchmark '{}' as '{u}': the agent runs as uid {me} and only root can switch users",
                    def.name
                ))
            }
        }
    }
}

/// Hands a task directory to the user the task runs as.
pub fn give_dir(dir: &Path, ra: &RunAs) -> Result<(), String> {
    std::os::unix::fs::chown(dir, Some(ra.uid), Some(ra.gid))
        .map_err(|e| format!("cannot hand {} to user '{}': {e}", dir.display(), ra.name))
}

/// Prepares `cmd` for a task: own process group, SIGKILL when the agent dies,
/// the agent's mark, and the user switch.
pub fn contain(cmd: &mut tokio::process::Command, work_dir: &Path, ra: Option<&RunAs>) {
    cmd.process_group(0).env(MARK_VAR, work_dir);
    if let Some(ra) = ra {
        // std drops supplementary groups (setgroups(0)) when root sets a uid.
        cmd.uid(ra.uid)
            .gid(ra.gid)
            .env("USER", &ra.name)
            .env("LOGNAME", &ra.name)
            .env("HOME", &ra.home);
    }
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (prctl, getppid, _exit).
    unsafe {
        cmd.pre_exec(move || {
            // Set after the user switch (which would clear it): the first
            // process of the task dies with the agent's thread that started it.
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            // The agent died between fork and prctl: do not run orphaned.
            if libc::getppid() != parent {
                libc::_exit(137);
            }
            Ok(())
        });
    }
}

/// Kills every process that carries `work_dir`'s mark (what an earlier life
/// of this agent left running) and returns their pids.
pub fn kill_leftovers(work_dir: &Path) -> Vec<i32> {
    let mark = format!("{MARK_VAR}={}", work_dir.display());
    let me = std::process::id() as i32;
    let mut killed = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return killed;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|v| v == mark.as_bytes()) {
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
            killed.push(pid);
        }
    }
    killed
}

/// Removes the task directories (`{work}/{run}/{task}-{attempt}`) an earlier
/// life of this agent left; returns how many run directories went. Only
/// directories named like run ids are touched, whatever else the work
/// directory holds, and none holding a directory of `keep` (the Slurm batch
/// jobs the agent re-attaches to).
pub fn remove_stale_dirs(work_dir: &Path, keep: &[std::path::PathBuf]) -> usize {
    let mut n = 0;
    let Ok(rd) = std::fs::read_dir(work_dir) else {
        return 0;
    };
    for e in rd.flatten() {
        let is_run = e
            .file_name()
            .to_str()
            .is_some_and(|s| benchlake_core::ids::validate_id("run_id", s).is_ok());
        let kept = keep.iter().any(|k| k.starts_with(e.path()));
        if is_run
            && !kept
            && e.file_type().map(|t| t.is_dir()).unwrap_or(false)
            && std::fs::remove_dir_all(e.path()).is_ok()
        {
            n += 1;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_resolve() {
        let root = lookup_user("root").unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        let e = lookup_user("no-such-user-here").unwrap_err();
        assert!(e.contains("does not exist"), "{e}");
    }
}
