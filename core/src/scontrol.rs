//! What benchlake asks of `scontrol` to act on Slurm nodes: read a node's
//! state and drain reason, drain it, resume it (docs/slurm.md, "Draining
//! failing nodes"). Used by the coordinator's node actions and by
//! `benchlake node-check --drain` (Slurm's HealthCheckProgram).
//!
//! `scontrol` always runs as an argument vector, never through a shell; the
//! node name is checked first ([`check_node_name`]) and the reason is one
//! argument (`reason=…`), so neither can become another option.
//!
//! The drain reason is what tells benchlake's drains from everybody else's:
//! `benchlake: CHECK VALUE vs REFERENCE (run RUN_ID)` ([`drain_reason`]). A
//! node is resumed only when its current reason is exactly the one benchlake
//! set, never when an administrator (or NHC, or Slurm itself) drained it or
//! changed the reason since.
use std::process::Command;
use std::time::Duration;

/// Prefix of every drain reason benchlake sets.
pub const REASON_PREFIX: &str = "benchlake: ";

/// Longest node name accepted.
pub const MAX_NODE_NAME: usize = 128;

/// What went wrong with scontrol.
#[derive(Debug, thiserror::Error)]
pub enum ScontrolError {
    /// A node name that may not reach scontrol.
    #[error("node name '{name}': {why}")]
    InvalidNode { name: String, why: String },
    /// scontrol could not be started.
    #[error("cannot run {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    /// scontrol exited with an error.
    #[error("{program} {args} exited with {code}: {stderr}")]
    Failed {
        program: String,
        args: String,
        code: String,
        stderr: String,
    },
    /// scontrol did not answer in time.
    #[error("{program} {args} did not finish within {secs} s")]
    Timeout {
        program: String,
        args: String,
        secs: u64,
    },
    /// The program is empty.
    #[error("no scontrol program configured")]
    NoProgram,
}

/// Refuses node names Slurm does not use: only letters, digits, `_ - .`, not
/// starting with `-`, at most [`MAX_NODE_NAME`] characters.
pub fn check_node_name(name: &str) -> Result<(), ScontrolError> {
    let bad = |why: &str| {
        Err(ScontrolError::InvalidNode {
            name: name.escape_default().to_string(),
            why: why.to_string(),
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_NODE_NAME {
        return bad("longer than 128 characters");
    }
    if name.starts_with('-') {
        return bad("starts with '-'");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return bad("only letters, digits, '_', '-' and '.' are allowed");
    }
    Ok(())
}

/// A figure in a drain reason: integers without decimals, others with two
/// significant decimals.
pub fn fmt_figure(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(x) if x.fract() == 0.0 && x.abs() < 1e15 => format!("{x:.0}"),
        Some(x) => format!("{x:.2}"),
    }
}

/// The reason benchlake drains a node with:
/// `benchlake: CHECK VALUE vs REFERENCE (run RUN_ID)`.
pub fn drain_reason(
    check: &str,
    value: Option<f64>,
    reference: Option<f64>,
    run_id: &str,
) -> String {
    format!(
        "{REASON_PREFIX}{check} {} vs {} (run {run_id})",
        fmt_figure(value),
        fmt_figure(reference)
    )
}

/// A node as `scontrol show node` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    /// `State=` (e.g. `IDLE`, `IDLE+DRAIN`, `MIXED+DRAIN`, `DOWN*`).
    pub state: String,
    /// `Reason=` without Slurm's ` [user@time]` suffix; None when there is none.
    pub reason: Option<String>,
}

impl NodeStatus {
    /// Whether the node is drained or draining (DRAIN among the state's flags).
    pub fn drained(&self) -> bool {
        self.state.split('+').any(|f| f.starts_with("DRAIN"))
    }

    /// Whether the node is down (not by drain).
    pub fn down(&self) -> bool {
        self.state.split('+').any(|f| f.starts_with("DOWN"))
    }
}

/// Strips Slurm's ` [user@time]` suffix from a reason.
fn strip_reason_suffix(r: &str) -> &str {
    let r = r.trim();
    if r.ends_with(']')
        && let Some(i) = r.rfind(" [")
        && r[i..].contains('@')
    {
        return r[..i].trim_end();
    }
    r
}

/// Parses `scontrol show node NODE` output (the multi-line form).
pub fn parse_show_node(text: &str) -> Option<NodeStatus> {
    let mut state = None;
    let mut reason = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(r) = t.strip_prefix("Reason=") {
            // The reason runs to the end of its line (it may hold spaces).
            let r = strip_reason_suffix(r);
            if !r.is_empty() && r != "(null)" {
                reason = Some(r.to_string());
            }
            continue;
        }
        for tok in t.split_whitespace() {
            if let Some(s) = tok.strip_prefix("State=") {
                state = Some(s.to_string());
            }
        }
    }
    state.map(|state| NodeStatus { state, reason })
}

/// How to run scontrol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scontrol {
    /// The program and fixed leading arguments (`["scontrol"]`).
    pub program: Vec<String>,
    /// Extra environment (`SLURM_CONF`).
    pub env: Vec<(String, String)>,
    /// Longest wait for one call.
    pub timeout: Duration,
}

impl Default for Scontrol {
    fn default() -> Self {
        Self {
            program: vec!["scontrol".into()],
            env: Vec::new(),
            timeout: Duration::from_secs(20),
        }
    }
}

impl Scontrol {
    /// From a space-separated program and arguments (`/opt/slurm/bin/scontrol`).
    pub fn from_command_line(s: &str) -> Self {
        Self {
            program: s.split_whitespace().map(String::from).collect(),
            ..Self::default()
        }
    }

    fn run(&self, args: &[String]) -> Result<String, ScontrolError> {
        let (prog, fixed) = self.program.split_first().ok_or(ScontrolError::NoProgram)?;
        let mut cmd = Command::new(prog);
        cmd.args(fixed).args(args);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let shown = args.join(" ");
        let mut child = cmd.spawn().map_err(|source| ScontrolError::Spawn {
            program: prog.clone(),
            source,
        })?;
        let t0 = std::time::Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if t0.elapsed() > self.timeout => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(ScontrolError::Timeout {
                        program: prog.clone(),
                        args: shown,
                        secs: self.timeout.as_secs(),
                    });
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(source) => {
                    return Err(ScontrolError::Spawn {
                        program: prog.clone(),
                        source,
                    });
                }
            }
        }
        let out = child
            .wait_with_output()
            .map_err(|source| ScontrolError::Spawn {
                program: prog.clone(),
                source,
            })?;
        if !out.status.success() {
            return Err(ScontrolError::Failed {
                program: prog.clone(),
                args: shown,
                code: out
                    .status
                    .code()
                    .map_or_else(|| "a signal".to_string(), |c| format!("code {c}")),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `scontrol show node NODE`; None when scontrol printed no `State=`.
    pub fn show_node(&self, node: &str) -> Result<Option<NodeStatus>, ScontrolError> {
        check_node_name(node)?;
        let out = self.run(&["show".into(), "node".into(), node.into()])?;
        Ok(parse_show_node(&out))
    }

    /// `scontrol update nodename=NODE state=drain reason=REASON`.
    pub fn drain(&self, node: &str, reason: &str) -> Result<(), ScontrolError> {
        check_node_name(node)?;
        self.run(&[
            "update".into(),
            format!("nodename={node}"),
            "state=drain".into(),
            format!("reason={reason}"),
        ])
        .map(|_| ())
    }

    /// `scontrol update nodename=NODE state=resume`.
    pub fn resume(&self, node: &str) -> Result<(), ScontrolError> {
        check_node_name(node)?;
        self.run(&[
            "update".into(),
            format!("nodename={node}"),
            "state=resume".into(),
        ])
        .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHOW: &str = "NodeName=n2 Arch=x86_64 CoresPerSocket=1 \n   CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.10\n   OS=Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 \n   RealMemory=2000 AllocMem=0 FreeMem=1000 Sockets=2 Boards=1\n   State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A\n   Partitions=debug \n   Reason=benchlake: node.cores 2 vs 64 (run 01JX) [root@2026-11-24T05:40:00]\n\n";

    #[test]
    fn show_node_gives_state_and_reason_without_slurms_suffix() {
        let s = parse_show_node(SHOW).unwrap();
        assert_eq!(s.state, "IDLE+DRAIN");
        assert_eq!(
            s.reason.as_deref(),
            Some("benchlake: node.cores 2 vs 64 (run 01JX)")
        );
        assert!(s.drained() && !s.down());
        let idle = parse_show_node("NodeName=n1\n   State=IDLE ThreadsPerCore=1\n").unwrap();
        assert_eq!(idle.reason, None);
        assert!(!idle.drained());
        for st in ["MIXED+DRAIN", "DRAINED", "DRAINING", "IDLE+DRAIN*"] {
            assert!(
                NodeStatus {
                    state: st.into(),
                    reason: None
                }
                .drained(),
                "{st}"
            );
        }
        assert!(
            NodeStatus {
                state: "DOWN*".into(),
                reason: None
            }
            .down()
        );
        assert_eq!(parse_show_node("Node n9 not found\n"), None);
    }

    #[test]
    fn reasons_name_check_value_reference_and_run() {
        assert_eq!(
            drain_reason("node.cores", Some(2.0), Some(64.0), "01JX"),
            "benchlake: node.cores 2 vs 64 (run 01JX)"
        );
        assert_eq!(
            drain_reason("node.write_bw_of_median", Some(25.123), Some(50.0), "R"),
            "benchlake: node.write_bw_of_median 25.12 vs 50 (run R)"
        );
        assert_eq!(
            drain_reason("node.kernel", None, None, "R"),
            "benchlake: node.kernel - vs - (run R)"
        );
    }

    #[test]
    fn bad_node_names_never_reach_scontrol() {
        let s = Scontrol {
            program: vec!["/nonexistent/scontrol".into()],
            ..Default::default()
        };
        for bad in ["", "-n1", "n1 n2", "n1;reboot", "n[1-3]", "a=b"] {
            assert!(
                matches!(s.drain(bad, "x"), Err(ScontrolError::InvalidNode { .. })),
                "{bad}"
            );
        }
        assert!(matches!(
            s.show_node("n1"),
            Err(ScontrolError::Spawn { .. })
        ));
        check_node_name("node-01.cluster_a").unwrap();
    }

    #[test]
    fn arguments_reach_the_program_one_each_and_failures_carry_stderr() {
        let dir = std::env::temp_dir().join(format!("scontrol-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("argv");
        let prog = dir.join("fake-scontrol");
        std::fs::write(
            &prog,
            format!(
                "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > '{}'\nif [ \"$1\" = update ] && [ \"$2\" = nodename=bad ]; then echo 'slurm_update error: Invalid node name' >&2; exit 1; fi\necho '   State=IDLE'\n",
                log.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        let s = Scontrol {
            program: vec![prog.display().to_string()],
            ..Default::default()
        };
        s.drain("n2", "benchlake: node.cores 2 vs 64 (run R); $(reboot)")
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "update\nnodename=n2\nstate=drain\nreason=benchlake: node.cores 2 vs 64 (run R); $(reboot)\n"
        );
        let e = s.resume("bad").unwrap_err().to_string();
        assert!(
            e.contains("Invalid node name") && e.contains("code 1"),
            "{e}"
        );
        assert_eq!(s.show_node("n1").unwrap().unwrap().state, "IDLE");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
