//! A real Slurm cluster of three nodes on this host for tests
//! (docs/testing.md, docs/slurm.md): munged, slurmctld and three slurmd
//! (node names n1, n2, n3 sharing this host name, each on its own port), all
//! under a temporary directory with free ports, started in the foreground so
//! the fixture holds their PIDs and stops them (SIGTERM, then SIGKILL) when
//! dropped — after a passing test and after a panicking one alike — and then
//! kills the step daemons of any job still running.
//!
//! It installs nothing: `scripts/test.sh` installs `slurmctld slurmd
//! slurm-client munge`. Without them (or not as root, which slurmd needs)
//! [`SlurmCluster::start`] returns None after `common::unavailable` so the test
//! can skip — unless `CI=true`, where it panics: in CI the Slurm tests run.
//!
//! Use it from a test file with `#[path = "common/slurm.rs"] mod slurm;`.
#![allow(dead_code)]

#[path = "ports.rs"]
mod ports;
// Not every test file that includes this one uses both.
#[allow(unused_imports)]
pub use ports::{free_port, free_ports};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Programs the cluster needs.
const PROGRAMS: [&str; 6] = ["munged", "mungekey", "slurmctld", "slurmd", "sinfo", "srun"];

/// The Slurm node names.
pub const NODES: [&str; 3] = ["n1", "n2", "n3"];

/// A running three-node Slurm cluster.
pub struct SlurmCluster {
    dir: tempfile::TempDir,
    conf: PathBuf,
    /// (name, process), stopped in reverse order of start.
    daemons: Vec<(String, Child)>,
}

fn find(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    // The daemons live in sbin, which a non-login PATH may lack.
    dirs.extend(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from));
    dirs.into_iter().map(|d| d.join(prog)).find(|p| p.is_file())
}

fn short_hostname() -> String {
    let out = Command::new("hostname")
        .arg("-s")
        .output()
        .expect("run hostname -s");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The cluster cannot start: the running test is [`unavailable`](crate::common::unavailable)
/// (a failure under `CI=true`, a logged skip elsewhere) and gets None.
fn unavailable(why: &str) -> Option<SlurmCluster> {
    crate::common::unavailable(
        &crate::common::this_test(),
        &format!(
            "Slurm test cluster unavailable: {why}; install slurmctld slurmd slurm-client munge \
             (scripts/test.sh does, as root) to run this test"
        ),
    );
    None
}

impl SlurmCluster {
    /// Starts the cluster and waits until `sinfo` shows three idle nodes.
    /// None (after `common::unavailable`, which panics under `CI=true`) when
    /// Slurm or munge is not installed or the test does not run as root.
    pub fn start() -> Option<Self> {
        Self::start_with("")
    }

    /// [`start`](Self::start) with `extra` lines appended to slurm.conf
    /// (e.g. `MinJobAge=2`).
    pub fn start_with(extra: &str) -> Option<Self> {
        let missing: Vec<&str> = PROGRAMS.into_iter().filter(|p| find(p).is_none()).collect();
        if !missing.is_empty() {
            return unavailable(&format!("not installed: {}", missing.join(", ")));
        }
        if benchlake_agent::contain::current_user_name() != "root" {
            return unavailable("slurmd must run as root");
        }
        let dir = tempfile::Builder::new()
            .prefix("benchlake-slurm-")
            .tempdir()
            .expect("temporary directory");
        let d = dir.path();
        let mut c = SlurmCluster {
            conf: d.join("slurm.conf"),
            dir,
            daemons: Vec::new(),
        };
        c.start_munge();
        // Ports are checked free before use, yet another program may still
        // take one first: then start again on other ports.
        for attempt in 1..=3 {
            c.write_conf(extra);
            match c.start_slurm() {
                Ok(()) => return Some(c),
                Err(e) if attempt < 3 && e.contains("Address already in use") => {
                    eprintln!(
                        "Slurm test cluster: a port was taken; starting again on others:\n{e}"
                    );
                    c.stop_daemons(1);
                    // slurmctld saved the nodes of the failed attempt.
                    let state = c.path("state");
                    let _ = std::fs::remove_dir_all(&state);
                    std::fs::create_dir_all(&state).expect("mkdir");
                }
                Err(e) => panic!("{e}"),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    fn spawn(&mut self, name: &str, prog: &str, args: &[String]) {
        let log = std::fs::File::create(self.path(&format!("log/{name}.out"))).expect("log file");
        let err = log.try_clone().expect("log file");
        let child = Command::new(find(prog).unwrap_or_else(|| PathBuf::from(prog)))
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("start {prog}: {e}"));
        self.daemons.push((name.to_string(), child));
    }

    fn start_munge(&mut self) {
        for sub in ["munge", "log", "state", "spool", "tmp"] {
            std::fs::create_dir_all(self.path(sub)).expect("mkdir");
        }
        let key = self.path("munge/munge.key");
        let st = Command::new(find("mungekey").expect("mungekey"))
            .args(["-c", "-f", "-k"])
            .arg(&key)
            .status()
            .expect("run mungekey");
        assert!(st.success(), "mungekey failed: {st}");
        let s = |p: &Path| p.display().to_string();
        let args = vec![
            "--foreground".to_string(),
            "--force".into(),
            format!("--socket={}", s(&self.socket())),
            format!("--key-file={}", s(&key)),
            format!("--pid-file={}", s(&self.path("munge/munged.pid"))),
            format!("--seed-file={}", s(&self.path("munge/munged.seed"))),
        ];
        self.spawn("munged", "munged", &args);
        self.wait_for("munged's socket", Duration::from_secs(10), |c| {
            c.socket().exists()
        });
    }

    fn socket(&self) -> PathBuf {
        self.path("munge/munge.socket")
    }

    fn write_conf(&self, extra: &str) {
        let host = short_hostname();
        let d = self.dir.path().display().to_string();
        let ports = free_ports(1 + NODES.len());
        let mut conf = format!(
            "# benchlake test cluster (cli/tests/common/slurm.rs)\n\
             ClusterName=benchlake\n\
             SlurmctldHost={host}(127.0.0.1)\n\
             SlurmctldPort={ctld}\n\
             SlurmUser=root\n\
             AuthType=auth/munge\n\
             CredType=cred/munge\n\
             AuthInfo=socket={d}/munge/munge.socket\n\
             StateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool/%n\n\
             SlurmdPidFile={d}/slurmd-%n.pid\n\
             SlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmctldLogFile={d}/log/slurmctld.log\n\
             SlurmdLogFile={d}/log/slurmd-%n.log\n\
             TmpFS={d}/tmp/%n\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core\n\
             SlurmdParameters=config_overrides\n\
             MpiDefault=none\n\
             ReturnToService=2\n",
            ctld = ports[0]
        );
        for (n, port) in NODES.iter().zip(&ports[1..]) {
            conf.push_str(&format!(
                "NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs=2 RealMemory=2000 State=UNKNOWN\n"
            ));
            for sub in ["spool", "tmp"] {
                std::fs::create_dir_all(self.path(&format!("{sub}/{n}"))).expect("mkdir");
            }
        }
        conf.push_str(&format!(
            "PartitionName=debug Nodes={} Default=YES MaxTime=INFINITE State=UP\n",
            NODES.join(",")
        ));
        conf.push_str(extra);
        std::fs::write(&self.conf, conf).expect("write slurm.conf");
    }

    fn start_slurm(&mut self) -> Result<(), String> {
        let conf = self.conf.display().to_string();
        self.spawn(
            "slurmctld",
            "slurmctld",
            &["-D".into(), "-f".into(), conf.clone()],
        );
        for n in NODES {
            self.spawn(
                &format!("slurmd-{n}"),
                "slurmd",
                &[
                    "-D".into(),
                    "-f".into(),
                    conf.clone(),
                    "-N".into(),
                    n.into(),
                ],
            );
        }
        self.try_wait_for("3 idle nodes in sinfo", Duration::from_secs(60), |c| {
            c.command("sinfo")
                .args(["-h", "-t", "idle", "-o", "%D"])
                .output()
                .ok()
                .is_some_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "3")
        })
    }

    /// Waits until `ready`, checking that no daemon died; panics with the
    /// daemons' logs after `limit`.
    fn wait_for(&mut self, what: &str, limit: Duration, ready: impl Fn(&Self) -> bool) {
        if let Err(e) = self.try_wait_for(what, limit, ready) {
            panic!("{e}");
        }
    }

    /// [`wait_for`](Self::wait_for), returning the failure with the logs.
    fn try_wait_for(
        &mut self,
        what: &str,
        limit: Duration,
        ready: impl Fn(&Self) -> bool,
    ) -> Result<(), String> {
        let t = Instant::now();
        loop {
            if ready(self) {
                return Ok(());
            }
            let died = self
                .daemons
                .iter_mut()
                .find_map(|(name, ch)| match ch.try_wait() {
                    Ok(Some(st)) => Some(format!("{name} exited ({st})")),
                    _ => None,
                });
            if let Some(d) = died {
                return Err(format!("{d} while waiting for {what}:\n{}", self.logs()));
            }
            if t.elapsed() > limit {
                return Err(format!(
                    "no {what} after {} s:\n{}",
                    limit.as_secs(),
                    self.logs()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The daemons' logs (for failure messages).
    pub fn logs(&self) -> String {
        let mut out = String::new();
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.path("log"))
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        files.sort();
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(20).collect();
            out.push_str(&format!("--- {}\n", f.display()));
            for l in tail.into_iter().rev() {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }

    /// The daemons' PIDs (munged, slurmctld, slurmd n1..n3).
    pub fn pids(&self) -> Vec<u32> {
        self.daemons.iter().map(|(_, c)| c.id()).collect()
    }

    /// Lets other users reach the cluster: its directory (slurm.conf, the
    /// munge socket) becomes 0755, for Slurm commands run as another user
    /// (an agent's `--run-as`).
    pub fn open_to_users(&self) {
        use std::os::unix::fs::PermissionsExt;
        for d in [self.dir.path().to_path_buf(), self.path("munge")] {
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755))
                .unwrap_or_else(|e| panic!("chmod {}: {e}", d.display()));
        }
    }

    /// The configuration file (clients need `SLURM_CONF` set to it).
    pub fn conf(&self) -> &Path {
        &self.conf
    }

    /// A Slurm client command (`sinfo`, `squeue`, `srun`, …) for this cluster.
    pub fn command(&self, prog: &str) -> Command {
        let mut c = Command::new(find(prog).unwrap_or_else(|| PathBuf::from(prog)));
        c.env("SLURM_CONF", &self.conf);
        c
    }

    /// Runs a Slurm command of this cluster and returns its stdout; panics
    /// with its stderr when it fails.
    pub fn run_ok(&self, prog: &str, args: &[&str]) -> String {
        let out = self.command(prog).args(args).output().expect(prog);
        assert!(
            out.status.success(),
            "{prog} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The jobs Slurm still knows (`squeue -h -o "%i %T %R"`), one a line.
    pub fn queue(&self) -> String {
        self.command("squeue")
            .args(["-h", "-o", "%i %T %R"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    }

    /// Environment a program needs to reach this cluster, and Open MPI's
    /// settings for ranks on fake nodes sharing one host
    /// (reference/operations.md: shared memory crashes there).
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("SLURM_CONF", self.conf.display().to_string()),
            ("OMPI_MCA_btl", "self,tcp".into()),
            ("OMPI_MCA_btl_tcp_if_include", "lo".into()),
            ("OMPI_MCA_oob_tcp_if_include", "lo".into()),
            ("OMPI_ALLOW_RUN_AS_ROOT", "1".into()),
            ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

impl SlurmCluster {
    /// Stops the daemons started after the first `keep`, newest first.
    fn stop_daemons(&mut self, keep: usize) {
        while self.daemons.len() > keep {
            let Some((name, mut ch)) = self.daemons.pop() else {
                break;
            };
            // The PID of a child we spawned and have not reaped yet.
            let _ = Command::new("kill")
                .args(["-TERM", &ch.id().to_string()])
                .status();
            let t = Instant::now();
            loop {
                match ch.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if t.elapsed() < Duration::from_secs(5) => {
                        std::thread::sleep(Duration::from_millis(50))
                    }
                    _ => {
                        eprintln!("{name} did not stop on SIGTERM; killing it");
                        let _ = ch.kill();
                        let _ = ch.wait();
                        break;
                    }
                }
            }
        }
    }
}

impl SlurmCluster {
    /// Kills the step daemons this cluster's slurmd left running: a job still
    /// running when slurmd stops keeps its `slurmstepd`, re-parented to init,
    /// which outlived every test run on a developer's machine. Each is known
    /// by its environment's `SLURM_CONF`, this cluster's own file.
    fn kill_orphan_steps(&self) {
        let want = format!("SLURM_CONF={}", self.conf.display());
        let Ok(procs) = std::fs::read_dir("/proc") else {
            return;
        };
        for p in procs.flatten() {
            let path = p.path();
            let is_step =
                std::fs::read(path.join("cmdline")).is_ok_and(|c| c.starts_with(b"slurmstepd"));
            let ours = is_step
                && std::fs::read(path.join("environ"))
                    .is_ok_and(|e| e.split(|b| *b == 0).any(|v| v == want.as_bytes()));
            if ours && let Some(pid) = p.file_name().to_str() {
                let _ = Command::new("kill").args(["-KILL", pid]).status();
            }
        }
    }
}

impl Drop for SlurmCluster {
    fn drop(&mut self) {
        // slurmd first, then slurmctld, then munged: each by its PID.
        self.stop_daemons(0);
        self.kill_orphan_steps();
    }
}
