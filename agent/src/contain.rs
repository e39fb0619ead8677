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
//! - **Task directories** ([`task_dir`]): every launcher's task directory
//!   and its stdout/stderr files are made here, owned by the user the task
//!   runs as, under parents no other user can have planted.
//! - **What is offered** ([`offered_catalog`]): the entries the agent will
//!   run, and the ones it refuses with the reason, sent at registration.
use std::ffi::{CStr, CString};
use std::fs::File;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use benchlake_core::bench::{BenchmarkDef, Catalog};

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

/// Why an agent cannot run a benchmark as anybody: the short reason sent to
/// the coordinator ([`offered_catalog`]) and shown by `agents list`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunAsError {
    /// A root agent, and neither the entry nor `--run-as` names a user.
    #[error("running as root without run_as")]
    RootWithoutUser,
    /// The user to switch to is not in the password database.
    #[error("run_as user '{0}' does not exist on this node")]
    NoSuchUser(String),
    /// An unprivileged agent asked to run as someone else.
    #[error("the agent runs as uid {uid} and cannot switch to '{user}' (only root can)")]
    CannotSwitch { uid: u32, user: String },
}

/// The user a task of `def` must switch to: None runs it as the agent itself.
/// `default` is the agent's `--run-as`.
pub fn run_as_for(def: &BenchmarkDef, default: Option<&str>) -> Result<Option<RunAs>, String> {
    resolve_run_as(def, default).map_err(|e| match e {
        RunAsError::RootWithoutUser => format!(
            "refusing to run benchmark '{}' as root: give its catalog entry a `run_as` user, \
             or start the agent with --run-as USER (--run-as root allows root explicitly)",
            def.name
        ),
        RunAsError::NoSuchUser(u) => format!("user '{u}' does not exist on this node"),
        RunAsError::CannotSwitch { uid, user } => format!(
            "cannot run benchmark '{}' as '{user}': the agent runs as uid {uid} and only root can switch users",
            def.name
        ),
    })
}

/// [`run_as_for`] with the reason as a value.
pub fn resolve_run_as(
    def: &BenchmarkDef,
    default: Option<&str>,
) -> Result<Option<RunAs>, RunAsError> {
    let want = def.run_as.as_deref().or(default);
    let me = euid();
    match (me, want) {
        (0, None) => Err(RunAsError::RootWithoutUser),
        (0, Some("root")) => Ok(None),
        (0, Some(u)) => lookup_user(u)
            .map(Some)
            .map_err(|_| RunAsError::NoSuchUser(u.to_string())),
        (_, None) => Ok(None),
        (me, Some(u)) => {
            let ra = lookup_user(u).map_err(|_| RunAsError::NoSuchUser(u.to_string()))?;
            if ra.uid == me {
                Ok(None)
            } else {
                Err(RunAsError::CannotSwitch {
                    uid: me,
                    user: u.to_string(),
                })
            }
        }
    }
}

/// A catalog entry the agent will not run, and why (sent at registration as
/// `RegisterRequest.refused`; `benchlake agents list` shows it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub name: String,
    pub reason: String,
}

/// What the agent offers: the entries of `catalog` it will run, and the ones
/// it refuses with the reason — its program is missing on this node
/// ([`crate::missing_program`]), or it has no user to run as
/// ([`resolve_run_as`]: a root agent without `run_as` or `--run-as`, a user
/// that does not exist, an unprivileged agent asked to switch users).
/// `run_as` is the agent's `--run-as`. The coordinator only places runs on
/// agents offering the benchmark, so a refused entry never reaches a task.
pub fn offered_catalog(catalog: &Catalog, run_as: Option<&str>) -> (Catalog, Vec<Refused>) {
    let mut offered = Catalog::default();
    let mut refused = Vec::new();
    for b in &catalog.benchmarks {
        let why = crate::missing_program(b)
            .or_else(|| resolve_run_as(b, run_as).err().map(|e| e.to_string()));
        match why {
            // Offered with the user it runs as, for `benchmarks show`.
            None => offered.benchmarks.push(BenchmarkDef {
                run_as: b.run_as.clone().or_else(|| run_as.map(str::to_string)),
                ..b.clone()
            }),
            Some(reason) => refused.push(Refused {
                name: b.name.clone(),
                reason,
            }),
        }
    }
    (offered, refused)
}

/// Why a task directory could not be made ([`task_dir`]).
#[derive(Debug, thiserror::Error)]
pub enum TaskDirError {
    /// A parent of the task directory another user could have planted or
    /// could change: handing files over under it could be turned against
    /// another file.
    #[error(
        "refusing to make the task directory {dir}: its parent {parent} {why} \
         (each parent must be a directory owned by root or the agent's user, not writable by group or others \
         unless sticky like /tmp)"
    )]
    UnsafeParent {
        dir: PathBuf,
        parent: PathBuf,
        why: String,
    },
    /// Creating, opening or inspecting a path failed.
    #[error("cannot make the task directory: {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The hand-over to the run-as user failed.
    #[error("cannot hand {path} to user '{user}': {source}")]
    Chown {
        path: PathBuf,
        user: String,
        #[source]
        source: std::io::Error,
    },
}

/// Makes the directory of a task, for every launcher (local, mpirun, srun,
/// sbatch): `dir` is created fresh (an earlier attempt's is removed) with mode
/// 0700, with empty log files `stdout` and `stderr.txt` in it (0600, created
/// new, never through a symbolic link); with `ra` the directory and both files
/// are handed to that user — slurmd opens the log files of a batch job as the
/// job's user, which failed when only the directory was handed over. Returns
/// the open log files (stdout, stderr).
///
/// Before anything is handed over, every parent of `dir` up to `/` must be a
/// real directory (no symbolic link) owned by root or the agent's user and not
/// writable by group or others, unless sticky (`/tmp`): no other user can
/// then have planted or swapped a component under which the agent would
/// create, open or chown. The parent itself is created when missing (0755).
pub fn task_dir(
    dir: &Path,
    stdout: &str,
    ra: Option<&RunAs>,
) -> Result<(File, File), TaskDirError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| TaskDirError::Io { path, source }
    };
    let parent = dir.parent().unwrap_or(Path::new("/"));
    if ra.is_some() {
        // What exists already is checked before anything is made under it.
        if let Some(existing) = parent.ancestors().find(|a| a.exists()) {
            check_parents(dir, existing)?;
        }
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(parent)
        .map_err(io(parent))?;
    if ra.is_some() {
        check_parents(dir, parent)?;
    }
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(dir)(e)),
    }
    // Not recursive: the directory must be new, made by us.
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(io(dir))?;
    let open = |name: &str| -> Result<File, TaskDirError> {
        let path = dir.join(name);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(io(&path))?;
        if let Some(ra) = ra {
            std::os::unix::fs::fchown(&f, Some(ra.uid), Some(ra.gid)).map_err(|source| {
                TaskDirError::Chown {
                    path: path.clone(),
                    user: ra.name.clone(),
                    source,
                }
            })?;
        }
        Ok(f)
    };
    let out = open(stdout)?;
    let err = if stdout == STDERR {
        out.try_clone().map_err(io(dir))?
    } else {
        open(STDERR)?
    };
    if let Some(ra) = ra {
        std::os::unix::fs::lchown(dir, Some(ra.uid), Some(ra.gid)).map_err(|source| {
            TaskDirError::Chown {
                path: dir.to_path_buf(),
                user: ra.name.clone(),
                source,
            }
        })?;
    }
    Ok((out, err))
}

/// The stderr log of every task.
pub const STDERR: &str = "stderr.txt";

/// [`task_dir`]'s check of the parents of `dir`, from `parent` up to `/`.
fn check_parents(dir: &Path, parent: &Path) -> Result<(), TaskDirError> {
    let me = euid();
    let parent = std::path::absolute(parent).map_err(|source| TaskDirError::Io {
        path: parent.to_path_buf(),
        source,
    })?;
    let mut p = Some(parent.as_path());
    while let Some(cur) = p {
        let path = if cur.as_os_str().is_empty() {
            Path::new(".")
        } else {
            cur
        };
        let unsafe_parent = |why: String| TaskDirError::UnsafeParent {
            dir: dir.to_path_buf(),
            parent: path.to_path_buf(),
            why,
        };
        let md = std::fs::symlink_metadata(path).map_err(|source| TaskDirError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        if md.file_type().is_symlink() {
            return Err(unsafe_parent("is a symbolic link".into()));
        }
        if !md.is_dir() {
            return Err(unsafe_parent("is not a directory".into()));
        }
        if md.uid() != 0 && md.uid() != me {
            return Err(unsafe_parent(format!(
                "is owned by uid {}, neither root nor the agent",
                md.uid()
            )));
        }
        let mode = md.mode();
        if mode & 0o022 != 0 && mode & 0o1000 == 0 {
            return Err(unsafe_parent(format!(
                "is writable by {} (mode {:o})",
                if mode & 0o002 != 0 {
                    "others"
                } else {
                    "its group"
                },
                mode & 0o7777
            )));
        }
        p = cur.parent();
    }
    Ok(())
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
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    const CAT: &str = r#"
[[benchmark]]
name = "plain"
kind = "noop"
command = ["true"]

[[benchmark]]
name = "ghost"
kind = "noop"
command = ["true"]
run_as = "benchlake-no-such-user"

[[benchmark]]
name = "missing"
kind = "noop"
command = ["benchlake-no-such-program"]
run_as = "root"
"#;

    #[test]
    fn only_what_the_agent_will_run_is_offered_and_the_rest_says_why() {
        let cat = Catalog::from_toml(CAT).unwrap();
        let names = |c: &Catalog| {
            c.benchmarks
                .iter()
                .map(|b| b.name.clone())
                .collect::<Vec<_>>()
        };
        let why = |r: &[Refused], n: &str| {
            r.iter()
                .find(|x| x.name == n)
                .map(|x| x.reason.clone())
                .unwrap_or_default()
        };
        // With --run-as naming the agent's own user, `plain` runs.
        let me = current_user_name();
        let (offered, refused) = offered_catalog(&cat, Some(&me));
        assert_eq!(names(&offered), ["plain"]);
        assert_eq!(refused.len(), 2, "{refused:?}");
        assert_eq!(
            why(&refused, "ghost"),
            "run_as user 'benchlake-no-such-user' does not exist on this node"
        );
        assert_eq!(
            why(&refused, "missing"),
            "its program 'benchlake-no-such-program' is not an executable file on PATH"
        );
        // Without --run-as, a root agent refuses entries that name no user.
        let (offered, refused) = offered_catalog(&cat, None);
        if euid() == 0 {
            assert!(offered.benchmarks.is_empty());
            assert_eq!(why(&refused, "plain"), "running as root without run_as");
        } else {
            assert_eq!(names(&offered), ["plain"]);
        }
    }

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn task_directories_and_their_logs_belong_to_the_run_as_user() {
        let me = lookup_user(&current_user_name()).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("work/01RUN/01TASK-1");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("old.txt"), "an earlier attempt").unwrap();
        let (mut out, _err) = task_dir(&dir, "stdout.txt", Some(&me)).unwrap();
        std::io::Write::write_all(&mut out, b"hello").unwrap();
        assert_eq!(mode(&dir), 0o700);
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["stderr.txt", "stdout.txt"], "made fresh");
        for f in ["stdout.txt", "stderr.txt"] {
            let md = std::fs::symlink_metadata(dir.join(f)).unwrap();
            assert_eq!(
                (md.uid(), md.gid(), md.mode() & 0o777),
                (me.uid, me.gid, 0o600)
            );
        }
        let md = std::fs::metadata(&dir).unwrap();
        assert_eq!((md.uid(), md.gid()), (me.uid, me.gid));
        // A program's own stdout name: one file for both when it is stderr.txt.
        let d2 = tmp.path().join("work/01RUN/01TASK-2");
        task_dir(&d2, "result.json", None).unwrap();
        assert!(d2.join("result.json").is_file() && d2.join("stderr.txt").is_file());
    }

    #[test]
    fn a_parent_another_user_could_plant_is_refused() {
        let me = lookup_user(&current_user_name()).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        // World-writable without the sticky bit: anyone could swap the run
        // directory for a link.
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = task_dir(&open.join("01RUN/01TASK-1"), "stdout.txt", Some(&me))
            .unwrap_err()
            .to_string();
        assert!(e.contains("is writable by others (mode 777)"), "{e}");
        assert!(!open.join("01RUN").exists(), "nothing made under it");
        // Sticky (like /tmp) is fine: nobody can replace another's entry.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        task_dir(&open.join("01RUN/01TASK-1"), "stdout.txt", Some(&me)).unwrap();
        // A symbolic link on the way is refused.
        let real = tmp.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, tmp.path().join("link")).unwrap();
        let e = task_dir(
            &tmp.path().join("link/01RUN/01TASK-1"),
            "stdout.txt",
            Some(&me),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("is a symbolic link"), "{e}");
        // Group-writable.
        let grp = tmp.path().join("grp");
        std::fs::create_dir(&grp).unwrap();
        std::fs::set_permissions(&grp, std::fs::Permissions::from_mode(0o775)).unwrap();
        let e = task_dir(&grp.join("r/t"), "stdout.txt", Some(&me))
            .unwrap_err()
            .to_string();
        assert!(e.contains("writable by its group"), "{e}");
        // Without a user to hand over to, nothing is checked (an unprivileged
        // agent in a group-writable project directory keeps working).
        task_dir(&grp.join("r/t"), "stdout.txt", None).unwrap();
    }

    #[test]
    fn users_resolve() {
        let root = lookup_user("root").unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        let e = lookup_user("no-such-user-here").unwrap_err();
        assert!(e.contains("does not exist"), "{e}");
    }
}
