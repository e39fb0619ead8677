//! What a run asks of Slurm and what Slurm says back (docs/slurm.md): the
//! allocation options (node count, tasks per node, partition, time limit,
//! node list, features, account, QoS, reservation), the `sbatch` argument
//! vector of batch mode ([`SlurmOptions::batch_args`]), and a job's state as
//! `scontrol`/`sacct` report it, mapped onto what a task does next
//! ([`JobStatus`], [`JobPhase`]).
//!
//! The same options serve the `srun` launcher and batch mode: both take the
//! allocation options as the long options `srun` and `sbatch` share
//! ([`SlurmOptions::alloc_args`]). A spec's options come first, the catalog
//! entry's `slurm` table fills what the spec leaves unset
//! ([`SlurmOptions::or`]), Slurm's own defaults the rest.
//!
//! Every name is checked for its characters ([`SlurmOptions::validate`]) by
//! the coordinator when the spec arrives and by the agent before it builds
//! the argument vector; a value is always one `--option=value` argument,
//! never part of a shell string.
use serde::{Deserialize, Serialize};

/// Queue wait allowed when a run sets none: one day (a nightly run that
/// has not started by the next night is cancelled).
pub const DEFAULT_QUEUE_TIMEOUT_S: u64 = 86_400;
/// Longest queue wait a run may ask for: 7 days.
pub const MAX_QUEUE_TIMEOUT_S: u32 = 604_800;

/// Slurm allocation options of a run (all optional).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SlurmOptions {
    /// `--nodes`: node count (0 = Slurm's choice).
    pub nodes: u32,
    /// `--ntasks-per-node` (0 = unset).
    pub ntasks_per_node: u32,
    /// `--partition` (empty = the default partition).
    pub partition: String,
    /// `--time` in minutes (0 = the partition's default).
    pub time_limit_min: u32,
    /// sbatch launcher: the longest wait in Slurm's queue, in seconds, before
    /// the job is cancelled (0 = [`DEFAULT_QUEUE_TIMEOUT_S`]). The run's own
    /// `timeout_s` counts from when Slurm starts the job, so a short
    /// benchmark behind a long queue is not timed out by the wait.
    pub queue_timeout_s: u32,
    /// `--nodelist`: Slurm node names or ranges (`n[1-3]`); empty = Slurm
    /// places the tasks.
    pub nodelist: Vec<String>,
    /// `--account`.
    pub account: String,
    /// `--qos`.
    pub qos: String,
    /// `--reservation`.
    pub reservation: String,
    /// `--constraint`: node features the nodes must have (`ib&nvme`,
    /// `haswell|skylake`); empty = any node.
    pub constraint: String,
}

/// A Slurm option that may not reach Slurm.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidSlurmOption {
    /// The option (`slurm.partition`, …), with the caller's prefix.
    pub field: String,
    /// Why it is refused.
    pub message: String,
}

/// Most nodes a run may ask for.
pub const MAX_NODES: u32 = 100_000;
/// Most tasks per node.
pub const MAX_TASKS_PER_NODE: u32 = 10_000;
/// Longest time limit (one year, in minutes).
pub const MAX_TIME_LIMIT_MIN: u32 = 525_600;
/// Longest name or node-list entry.
const MAX_NAME: usize = 128;
/// Most node-list entries.
const MAX_NODELIST: usize = 10_000;

/// Whether `c` may appear in a partition, account, QoS or reservation name.
fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// Whether `c` may appear in a node-list entry (a name or a range `n[1-3,5]`).
fn nodelist_char(c: char) -> bool {
    name_char(c) || matches!(c, '[' | ']' | ',')
}

/// Whether `c` may appear in a feature constraint (feature names joined by
/// `&` (and), `|` (or), `,`, with `(` `)` and counts `[ib*2]`).
fn constraint_char(c: char) -> bool {
    name_char(c) || matches!(c, '&' | '|' | ',' | '(' | ')' | '[' | ']' | '*')
}

fn check(
    prefix: &str,
    field: &str,
    value: &str,
    ok: fn(char) -> bool,
    allowed: &str,
) -> Result<(), InvalidSlurmOption> {
    let err = |message: String| InvalidSlurmOption {
        field: format!("{prefix}{field}"),
        message,
    };
    if value.len() > MAX_NAME {
        return Err(err(format!("longer than {MAX_NAME} characters")));
    }
    if value.starts_with('-') {
        return Err(err(format!("'{value}' starts with '-'")));
    }
    if let Some(c) = value.chars().find(|c| !ok(*c)) {
        return Err(err(format!(
            "'{}' holds '{}' (allowed: {allowed})",
            value.escape_default(),
            c.escape_default()
        )));
    }
    Ok(())
}

impl SlurmOptions {
    /// Whether no option is set.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    /// Refuses values Slurm should never see: characters outside Slurm's
    /// names (letters, digits, `_ - .`; node lists also `[ ] ,`), a leading
    /// `-`, over-long names and counts beyond sane bounds. `prefix` names the
    /// options in the error (`spec.slurm.`).
    pub fn validate(&self, prefix: &str) -> Result<(), InvalidSlurmOption> {
        let err = |field: &str, message: String| InvalidSlurmOption {
            field: format!("{prefix}{field}"),
            message,
        };
        if self.nodes > MAX_NODES {
            return Err(err("nodes", format!("{} is above {MAX_NODES}", self.nodes)));
        }
        if self.ntasks_per_node > MAX_TASKS_PER_NODE {
            return Err(err(
                "ntasks_per_node",
                format!("{} is above {MAX_TASKS_PER_NODE}", self.ntasks_per_node),
            ));
        }
        if self.queue_timeout_s > MAX_QUEUE_TIMEOUT_S {
            return Err(err(
                "queue_timeout_s",
                format!(
                    "{} is above {MAX_QUEUE_TIMEOUT_S} (7 days)",
                    self.queue_timeout_s
                ),
            ));
        }
        if self.time_limit_min > MAX_TIME_LIMIT_MIN {
            return Err(err(
                "time_limit_min",
                format!("{} is above {MAX_TIME_LIMIT_MIN}", self.time_limit_min),
            ));
        }
        let names = "letters, digits, '_', '-', '.'";
        for (field, v) in [
            ("partition", &self.partition),
            ("account", &self.account),
            ("qos", &self.qos),
            ("reservation", &self.reservation),
        ] {
            check(prefix, field, v, name_char, names)?;
        }
        check(
            prefix,
            "constraint",
            &self.constraint,
            constraint_char,
            "letters, digits, '_', '-', '.', '&', '|', ',', '(', ')', '[', ']', '*'",
        )?;
        if self.nodelist.len() > MAX_NODELIST {
            return Err(err("nodelist", format!("more than {MAX_NODELIST} entries")));
        }
        for n in &self.nodelist {
            if n.is_empty() {
                return Err(err("nodelist", "an empty node name".into()));
            }
            check(
                prefix,
                "nodelist",
                n,
                nodelist_char,
                "letters, digits, '_', '-', '.', '[', ']', ','",
            )?;
        }
        Ok(())
    }

    /// These options, with `defaults` (a catalog entry's) filling the unset ones.
    pub fn or(&self, defaults: &SlurmOptions) -> SlurmOptions {
        let s = |a: &String, b: &String| if a.is_empty() { b.clone() } else { a.clone() };
        let n = |a: u32, b: u32| if a == 0 { b } else { a };
        SlurmOptions {
            nodes: n(self.nodes, defaults.nodes),
            ntasks_per_node: n(self.ntasks_per_node, defaults.ntasks_per_node),
            partition: s(&self.partition, &defaults.partition),
            time_limit_min: n(self.time_limit_min, defaults.time_limit_min),
            nodelist: if self.nodelist.is_empty() {
                defaults.nodelist.clone()
            } else {
                self.nodelist.clone()
            },
            account: s(&self.account, &defaults.account),
            qos: s(&self.qos, &defaults.qos),
            reservation: s(&self.reservation, &defaults.reservation),
            constraint: s(&self.constraint, &defaults.constraint),
            queue_timeout_s: n(self.queue_timeout_s, defaults.queue_timeout_s),
        }
    }

    /// The queue wait allowed, in seconds ([`Self::queue_timeout_s`], its
    /// default when unset).
    pub fn queue_timeout(&self) -> u64 {
        if self.queue_timeout_s == 0 {
            DEFAULT_QUEUE_TIMEOUT_S
        } else {
            u64::from(self.queue_timeout_s)
        }
    }

    /// The allocation options as `srun` and `sbatch` both take them, one
    /// `--option=value` argument each, only the set ones. Call
    /// [`validate`](Self::validate) first.
    pub fn alloc_args(&self) -> Vec<String> {
        let mut a = Vec::new();
        if self.nodes > 0 {
            a.push(format!("--nodes={}", self.nodes));
        }
        if self.ntasks_per_node > 0 {
            a.push(format!("--ntasks-per-node={}", self.ntasks_per_node));
        }
        for (opt, v) in [
            ("partition", &self.partition),
            ("account", &self.account),
            ("qos", &self.qos),
            ("reservation", &self.reservation),
        ] {
            if !v.is_empty() {
                a.push(format!("--{opt}={v}"));
            }
        }
        if self.time_limit_min > 0 {
            a.push(format!("--time={}", self.time_limit_min));
        }
        if !self.nodelist.is_empty() {
            a.push(format!("--nodelist={}", self.nodelist.join(",")));
        }
        if !self.constraint.is_empty() {
            a.push(format!("--constraint={}", self.constraint));
        }
        a
    }

    /// The `sbatch` options of a batch task (after the program and its fixed
    /// arguments, before the batch script): `--parsable` (the job id on
    /// stdout), the job name, the task directory as working directory and
    /// home of the job's stdout and stderr, `--no-requeue` (a node failure
    /// fails the task with Slurm's reason instead of running it again
    /// unseen), `--export=ALL` (the agent's environment for the benchmark
    /// reaches the job), `--ntasks`, then [`alloc_args`](Self::alloc_args).
    /// Call [`validate`](Self::validate) first.
    pub fn batch_args(&self, job: &BatchJob<'_>) -> Vec<String> {
        let dir = job.dir.display().to_string();
        let file = |name: &str| slurm_filename(&format!("{dir}/{name}"));
        let mut a = vec![
            "--parsable".to_string(),
            format!("--job-name={}", job.name),
            format!("--chdir={dir}"),
            format!("--output={}", file(job.stdout)),
            format!("--error={}", file(job.stderr)),
            "--no-requeue".into(),
            "--export=ALL".into(),
            format!("--ntasks={}", job.ntasks.max(1)),
        ];
        a.extend(self.alloc_args());
        a
    }
}

/// A batch job to submit (see [`SlurmOptions::batch_args`]).
#[derive(Debug, Clone)]
pub struct BatchJob<'a> {
    /// `--job-name` (benchlake uses `benchlake-<task id>`).
    pub name: &'a str,
    /// The task's directory on a file system the compute nodes share.
    pub dir: &'a std::path::Path,
    /// File names of the job's stdout and stderr in `dir`.
    pub stdout: &'a str,
    pub stderr: &'a str,
    /// `--ntasks`: processes of the job (at least 1).
    pub ntasks: u32,
}

/// A path as `sbatch --output` takes it: `%` starts one of Slurm's
/// replacement patterns (`%j` the job id), so a literal one is doubled.
pub fn slurm_filename(path: &str) -> String {
    path.replace('%', "%%")
}

/// The job id `sbatch --parsable` printed (`ID` or `ID;CLUSTER`).
pub fn parse_job_id(stdout: &str) -> Option<u64> {
    let line = stdout.lines().map(str::trim).find(|l| !l.is_empty())?;
    let id = line.split(';').next()?;
    id.parse().ok().filter(|n| *n > 0)
}

/// What a task does about its Slurm job's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobPhase {
    /// Queued (PENDING, REQUEUED, held, nodes booting): the task waits and
    /// shows Slurm's reason.
    Waiting,
    /// Started (RUNNING, COMPLETING, SUSPENDED, …): the task runs.
    Running,
    /// COMPLETED: outputs are collected, the task is DONE.
    Completed,
    /// FAILED, TIMEOUT, NODE_FAIL, PREEMPTED, CANCELLED, OUT_OF_MEMORY,
    /// BOOT_FAIL, DEADLINE, …: the task FAILED with the state and reason.
    Ended,
}

/// A Slurm job's state, reason, nodes and exit code.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobStatus {
    /// `JobState` (`PENDING`, `TIMEOUT`, …), upper case, without sacct's
    /// ` by UID` suffix.
    pub state: String,
    /// `Reason` (`Resources`, `Priority`, `ReqNodeNotAvail,_…`,
    /// `TimeLimit`); empty when Slurm gives none (`None`).
    pub reason: String,
    /// `NodeList` in Slurm's compact form (`n[1-3]`); empty before the job
    /// has nodes.
    pub nodes: String,
    /// The batch script's exit code (`ExitCode=N:S`), when known.
    pub exit_code: Option<i32>,
    /// The signal that ended it (the `S` of `ExitCode=N:S`), 0 for none.
    pub signal: i32,
}

/// A line Slurm printed that is not a job's status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read Slurm's job status from '{0}'")]
pub struct BadJobStatus(pub String);

impl JobStatus {
    /// Parses one line of `scontrol show job ID -o` (`Key=Value` pairs; a
    /// value may hold spaces, so a word without `=` belongs to the value
    /// before it).
    pub fn parse_scontrol(line: &str) -> Result<Self, BadJobStatus> {
        let mut pairs: Vec<(&str, String)> = Vec::new();
        for word in line.split_whitespace() {
            match word.split_once('=') {
                Some((k, v))
                    if !k.is_empty()
                        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == ':') =>
                {
                    pairs.push((k, v.to_string()))
                }
                _ => {
                    if let Some((_, v)) = pairs.last_mut() {
                        v.push(' ');
                        v.push_str(word);
                    }
                }
            }
        }
        let get = |k: &str| {
            pairs
                .iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| v.as_str())
        };
        let Some(state) = get("JobState") else {
            return Err(BadJobStatus(line.chars().take(200).collect()));
        };
        let mut s = JobStatus {
            state: clean_state(state),
            reason: none_empty(get("Reason").unwrap_or("")),
            nodes: none_empty(get("NodeList").unwrap_or("")),
            ..Default::default()
        };
        if let Some(ec) = get("ExitCode") {
            s.set_exit(ec);
        }
        Ok(s)
    }

    /// Parses one line of `sacct -j ID -X -n -P -o State,ExitCode,NodeList,Reason`
    /// (fields separated by `|`; sacct of older Slurm without `Reason`
    /// gives three fields).
    pub fn parse_sacct(line: &str) -> Result<Self, BadJobStatus> {
        let f: Vec<&str> = line.trim().split('|').collect();
        if f.len() < 3 || f[0].trim().is_empty() {
            return Err(BadJobStatus(line.chars().take(200).collect()));
        }
        let mut s = JobStatus {
            state: clean_state(f[0]),
            nodes: none_empty(f[2]),
            reason: none_empty(f.get(3).copied().unwrap_or("")),
            ..Default::default()
        };
        s.set_exit(f[1]);
        Ok(s)
    }

    fn set_exit(&mut self, ec: &str) {
        let (code, sig) = ec.trim().split_once(':').unwrap_or((ec.trim(), "0"));
        self.exit_code = code.parse().ok();
        self.signal = sig.parse().unwrap_or(0);
    }

    /// What the task does about this state. A state this build does not
    /// know is treated as still running (the job is followed until Slurm
    /// names a final one).
    pub fn phase(&self) -> JobPhase {
        match self.state.as_str() {
            "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "RESV_DEL_HOLD"
            | "CONFIGURING" => JobPhase::Waiting,
            "COMPLETED" => JobPhase::Completed,
            "FAILED" | "TIMEOUT" | "NODE_FAIL" | "PREEMPTED" | "CANCELLED" | "OUT_OF_MEMORY"
            | "BOOT_FAIL" | "DEADLINE" | "REVOKED" | "SPECIAL_EXIT" => JobPhase::Ended,
            _ => JobPhase::Running,
        }
    }

    /// How users see it: `Slurm job 7 PENDING (Resources)`, `Slurm job 7
    /// TIMEOUT (TimeLimit) on n[1-3]`, `Slurm job 7 FAILED (NonZeroExitCode)
    /// on n1, exit code 3`.
    pub fn describe(&self, job_id: u64) -> String {
        let mut s = format!("Slurm job {job_id} {}", self.state);
        if !self.reason.is_empty() {
            s.push_str(&format!(" ({})", self.reason));
        }
        if !self.nodes.is_empty() && self.phase() != JobPhase::Waiting {
            s.push_str(&format!(" on {}", self.nodes));
        }
        if self.phase() == JobPhase::Ended {
            match (self.exit_code, self.signal) {
                (Some(c), 0) if c != 0 => s.push_str(&format!(", exit code {c}")),
                (_, sig) if sig != 0 => s.push_str(&format!(", signal {sig}")),
                _ => {}
            }
        }
        s
    }
}

/// `CANCELLED by 0` (sacct) → `CANCELLED`; `timeout` → `TIMEOUT`.
fn clean_state(s: &str) -> String {
    s.split_whitespace()
        .next()
        .unwrap_or("")
        .trim_end_matches('+')
        .to_ascii_uppercase()
}

/// Slurm's `None` and `(null)` are no value.
fn none_empty(s: &str) -> String {
    let s = s.trim();
    if s.is_empty() || s == "None" || s == "(null)" {
        String::new()
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_become_long_options_and_bad_names_are_refused() {
        let o = SlurmOptions {
            nodes: 3,
            partition: "debug".into(),
            time_limit_min: 10,
            nodelist: vec!["n[1-2]".into(), "n3".into()],
            ..Default::default()
        };
        o.validate("spec.slurm.").unwrap();
        assert_eq!(
            o.alloc_args(),
            [
                "--nodes=3",
                "--partition=debug",
                "--time=10",
                "--nodelist=n[1-2],n3"
            ]
        );
        assert!(SlurmOptions::default().alloc_args().is_empty());
        for bad in [
            SlurmOptions {
                partition: "debug;rm -rf /".into(),
                ..Default::default()
            },
            SlurmOptions {
                partition: "--uid=0".into(),
                ..Default::default()
            },
            SlurmOptions {
                nodelist: vec!["n1 n2".into()],
                ..Default::default()
            },
            SlurmOptions {
                nodelist: vec![String::new()],
                ..Default::default()
            },
            SlurmOptions {
                account: "a$(id)".into(),
                ..Default::default()
            },
            SlurmOptions {
                nodes: MAX_NODES + 1,
                ..Default::default()
            },
        ] {
            let e = bad.validate("spec.slurm.").unwrap_err();
            assert!(e.field.starts_with("spec.slurm."), "{e}");
        }
        let e = SlurmOptions {
            qos: "a\nb".into(),
            ..Default::default()
        }
        .validate("x.")
        .unwrap_err();
        assert_eq!(e.field, "x.qos");
        assert!(e.message.contains("\\n"), "{e}");
    }

    #[test]
    fn batch_args_carry_the_directory_the_options_and_no_shell() {
        let o = SlurmOptions {
            nodes: 3,
            partition: "debug".into(),
            account: "hpc".into(),
            qos: "health".into(),
            reservation: "maint".into(),
            time_limit_min: 5,
            constraint: "ib&nvme".into(),
            ..Default::default()
        };
        o.validate("spec.slurm.").unwrap();
        let dir = std::path::Path::new("/shared/work/R/T-1 50%");
        let a = o.batch_args(&BatchJob {
            name: "benchlake-T",
            dir,
            stdout: "stdout.txt",
            stderr: "stderr.txt",
            ntasks: 6,
        });
        assert_eq!(
            a,
            [
                "--parsable",
                "--job-name=benchlake-T",
                "--chdir=/shared/work/R/T-1 50%",
                "--output=/shared/work/R/T-1 50%%/stdout.txt",
                "--error=/shared/work/R/T-1 50%%/stderr.txt",
                "--no-requeue",
                "--export=ALL",
                "--ntasks=6",
                "--nodes=3",
                "--partition=debug",
                "--account=hpc",
                "--qos=health",
                "--reservation=maint",
                "--time=5",
                "--constraint=ib&nvme",
            ]
        );
        for bad in ["ib;id", "-x", "a b", "$(id)", "a\nb"] {
            let e = SlurmOptions {
                constraint: bad.into(),
                ..Default::default()
            }
            .validate("spec.slurm.")
            .unwrap_err();
            assert_eq!(e.field, "spec.slurm.constraint", "{bad}: {e}");
        }
        assert_eq!(parse_job_id("42\n"), Some(42));
        assert_eq!(parse_job_id("43;cluster\n"), Some(43));
        assert_eq!(parse_job_id("sbatch: error: nope"), None);
        assert_eq!(parse_job_id(""), None);
    }

    #[test]
    fn scontrol_and_sacct_states_map_onto_task_phases() {
        let pending = "JobId=7 JobName=benchlake-T UserId=root(0) GroupId=root(0) MCS_label=N/A \
            Priority=1 Nice=0 Account=(null) QOS=(null) JobState=PENDING Reason=Resources \
            Dependency=(null) Requeue=0 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 \
            RunTime=00:00:00 TimeLimit=UNLIMITED NodeList=(null) NumNodes=4-4 \
            Command=/work/my dir/benchlake-batch.sh WorkDir=/work/my dir StdOut=/work/my dir/stdout.txt";
        let s = JobStatus::parse_scontrol(pending).unwrap();
        assert_eq!(s.state, "PENDING");
        assert_eq!(s.reason, "Resources");
        assert_eq!(s.nodes, "");
        assert_eq!(s.phase(), JobPhase::Waiting);
        assert_eq!(s.describe(7), "Slurm job 7 PENDING (Resources)");
        let t = "JobId=8 JobState=TIMEOUT Reason=TimeLimit Dependency=(null) ExitCode=0:15 NodeList=n[1-3]";
        let s = JobStatus::parse_scontrol(t).unwrap();
        assert_eq!(s.phase(), JobPhase::Ended);
        assert_eq!(s.nodes, "n[1-3]");
        assert_eq!(
            s.describe(8),
            "Slurm job 8 TIMEOUT (TimeLimit) on n[1-3], signal 15"
        );
        let f = "JobId=9 JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0 NodeList=n1";
        let s = JobStatus::parse_scontrol(f).unwrap();
        assert_eq!((s.exit_code, s.signal), (Some(3), 0));
        assert_eq!(
            s.describe(9),
            "Slurm job 9 FAILED (NonZeroExitCode) on n1, exit code 3"
        );
        let ok = "JobId=10 JobState=COMPLETED Reason=None ExitCode=0:0 NodeList=n[1-2]";
        let s = JobStatus::parse_scontrol(ok).unwrap();
        assert_eq!(s.phase(), JobPhase::Completed);
        assert_eq!(s.reason, "");
        assert_eq!(s.exit_code, Some(0));
        for (state, phase) in [
            ("RUNNING", JobPhase::Running),
            ("COMPLETING", JobPhase::Running),
            ("SUSPENDED", JobPhase::Running),
            ("REQUEUED", JobPhase::Waiting),
            ("CONFIGURING", JobPhase::Waiting),
            ("NODE_FAIL", JobPhase::Ended),
            ("PREEMPTED", JobPhase::Ended),
            ("CANCELLED", JobPhase::Ended),
            ("OUT_OF_MEMORY", JobPhase::Ended),
            ("BOOT_FAIL", JobPhase::Ended),
            ("DEADLINE", JobPhase::Ended),
            ("SOMETHING_NEW", JobPhase::Running),
        ] {
            let s = JobStatus::parse_scontrol(&format!("JobId=1 JobState={state}")).unwrap();
            assert_eq!(s.phase(), phase, "{state}");
        }
        let s = JobStatus::parse_sacct("CANCELLED by 0|0:15|n2|None").unwrap();
        assert_eq!(s.state, "CANCELLED");
        assert_eq!(s.describe(11), "Slurm job 11 CANCELLED on n2, signal 15");
        let s = JobStatus::parse_sacct("OUT_OF_MEMORY|0:125|n3").unwrap();
        assert_eq!(s.phase(), JobPhase::Ended);
        assert_eq!(s.exit_code, Some(0));
        assert!(
            JobStatus::parse_scontrol("slurm_load_jobs error: Invalid job id specified").is_err()
        );
        assert!(JobStatus::parse_sacct("").is_err());
        assert!(JobStatus::parse_sacct("garbage").is_err());
    }

    #[test]
    fn the_spec_wins_and_the_catalog_fills_in() {
        let catalog = SlurmOptions {
            partition: "batch".into(),
            time_limit_min: 30,
            nodes: 2,
            ..Default::default()
        };
        let spec = SlurmOptions {
            nodes: 3,
            ..Default::default()
        };
        let o = spec.or(&catalog);
        assert_eq!(o.nodes, 3);
        assert_eq!(o.partition, "batch");
        assert_eq!(o.time_limit_min, 30);
    }
}
