//! How pio's processes come to exist and learn their rank:
//! - under `mpirun` (Open MPI: `OMPI_COMM_WORLD_RANK/SIZE`, PMIx: `PMIX_RANK`;
//!   MPICH/Hydra: `PMI_RANK/PMI_SIZE`) or `srun` (`SLURM_PROCID/SLURM_NTASKS`),
//!   each process reads its rank from the environment, possibly on several
//!   nodes sharing the test directory;
//! - with `np=N`, the first process forks N copies of the same command line
//!   with `PIO_CHILD_RANK/SIZE/JOB` set and waits for them (it does no I/O);
//! - otherwise it runs alone.
//!
//! The job key that separates concurrent runs' rendezvous files comes from the
//! launcher (`PMIX_NAMESPACE`, `OMPI_MCA_ess_base_jobid`,
//! `SLURM_JOB_ID.SLURM_STEP_ID`), the `job_id` parameter, or the forking parent.
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use crate::error::{PioError, Result};

/// How this process was started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launch {
    /// One process, no peers.
    Single,
    /// Fork `np` local processes and wait for them.
    Fork { np: u32 },
    /// A rank of a multi-process run.
    Rank {
        rank: u32,
        size: u32,
        job: String,
        /// `fork`, `mpirun` or `slurm`.
        launcher: String,
    },
}

/// Environment variable names of a child of the forking parent.
pub const CHILD_RANK: &str = "PIO_CHILD_RANK";
pub const CHILD_SIZE: &str = "PIO_CHILD_SIZE";
pub const CHILD_JOB: &str = "PIO_CHILD_JOB";

/// Decides how this process runs, from the environment and `np`.
pub fn detect(
    np: u32,
    job_id: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Launch> {
    let num = |k: &str| env(k).and_then(|v| v.trim().parse::<u32>().ok());
    if let (Some(rank), Some(size)) = (num(CHILD_RANK), num(CHILD_SIZE)) {
        let job = env(CHILD_JOB).unwrap_or_else(|| "fork".into());
        return rank_of(rank, size, job, "fork");
    }
    let launcher_job = || {
        job_id
            .map(String::from)
            .or_else(|| env("PMIX_NAMESPACE"))
            .or_else(|| env("OMPI_MCA_ess_base_jobid"))
            .or_else(|| {
                env("SLURM_JOB_ID")
                    .map(|j| format!("{j}.{}", env("SLURM_STEP_ID").unwrap_or_default()))
            })
            .unwrap_or_else(|| "default".into())
    };
    let mpi_rank = num("OMPI_COMM_WORLD_RANK")
        .or_else(|| num("PMIX_RANK"))
        .or_else(|| num("PMI_RANK"));
    let mpi_size = num("OMPI_COMM_WORLD_SIZE").or_else(|| num("PMI_SIZE"));
    if let (Some(rank), Some(size)) = (mpi_rank, mpi_size) {
        return rank_of(rank, size, launcher_job(), "mpirun");
    }
    if let (Some(rank), Some(size)) = (num("SLURM_PROCID"), num("SLURM_NTASKS"))
        && size > 1
    {
        return rank_of(rank, size, launcher_job(), "slurm");
    }
    Ok(if np > 1 {
        Launch::Fork { np }
    } else {
        Launch::Single
    })
}

fn rank_of(rank: u32, size: u32, job: String, launcher: &str) -> Result<Launch> {
    if size == 0 || rank >= size {
        return Err(PioError::Launch(format!("rank {rank} of size {size}")));
    }
    Ok(Launch::Rank {
        rank,
        size,
        job,
        launcher: launcher.into(),
    })
}

/// Forks `np` copies of `exe args…` as ranks of one job and waits for them.
/// Returns the exit code: 0 if all succeeded, else the first non-zero code by
/// rank (so rank 0's "verification failed" code survives). If a child fails,
/// the others get `grace` to notice (through the barrier) before being killed.
pub fn fork_and_wait(np: u32, exe: &Path, args: &[String], grace: Duration) -> Result<i32> {
    let job = format!(
        "fork-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    let mut children: Vec<(u32, Child)> = Vec::new();
    for r in 0..np {
        let spawned = Command::new(exe)
            .args(args)
            .env(CHILD_RANK, r.to_string())
            .env(CHILD_SIZE, np.to_string())
            .env(CHILD_JOB, &job)
            .spawn();
        match spawned {
            Ok(c) => children.push((r, c)),
            Err(e) => {
                for (_, c) in &mut children {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return Err(PioError::Launch(format!("spawn {}: {e}", exe.display())));
            }
        }
    }
    let mut codes: Vec<Option<i32>> = vec![None; np as usize];
    let mut failed_at: Option<std::time::Instant> = None;
    loop {
        for (r, c) in &mut children {
            if let Some(slot) = codes.get_mut(*r as usize).filter(|s| s.is_none())
                && let Ok(Some(st)) = c.try_wait()
            {
                let code = st.code().unwrap_or(1);
                *slot = Some(code);
                if code != 0 && failed_at.is_none() {
                    failed_at = Some(std::time::Instant::now());
                }
            }
        }
        if codes.iter().all(Option::is_some) {
            break;
        }
        if failed_at.is_some_and(|t| t.elapsed() > grace) {
            for (r, c) in &mut children {
                if codes.get(*r as usize).is_some_and(Option::is_none) {
                    tracing::warn!(rank = *r, "killing rank after another rank failed");
                    let _ = c.kill();
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(codes.into_iter().flatten().find(|c| *c != 0).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| pairs.iter().find(|p| p.0 == k).map(|p| p.1.to_string())
    }

    #[test]
    fn detects_launchers() {
        assert_eq!(detect(0, None, env(&[])).unwrap(), Launch::Single);
        assert_eq!(detect(4, None, env(&[])).unwrap(), Launch::Fork { np: 4 });
        let l = detect(
            4,
            None,
            env(&[
                ("OMPI_COMM_WORLD_RANK", "2"),
                ("OMPI_COMM_WORLD_SIZE", "8"),
                ("PMIX_NAMESPACE", "ns1"),
            ]),
        )
        .unwrap();
        assert_eq!(
            l,
            Launch::Rank {
                rank: 2,
                size: 8,
                job: "ns1".into(),
                launcher: "mpirun".into()
            }
        );
        let l = detect(
            0,
            Some("j"),
            env(&[("PMIX_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "2")]),
        )
        .unwrap();
        assert!(matches!(l, Launch::Rank { rank: 1, size: 2, ref job, .. } if job == "j"));
        let l = detect(
            0,
            None,
            env(&[
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "3"),
                ("SLURM_JOB_ID", "77"),
                ("SLURM_STEP_ID", "0"),
            ]),
        )
        .unwrap();
        assert!(
            matches!(l, Launch::Rank { size: 3, ref job, ref launcher, .. } if job == "77.0" && launcher == "slurm")
        );
        let l = detect(
            9,
            None,
            env(&[(CHILD_RANK, "3"), (CHILD_SIZE, "4"), (CHILD_JOB, "f1")]),
        )
        .unwrap();
        assert!(matches!(l, Launch::Rank { rank: 3, ref launcher, .. } if launcher == "fork"));
        assert!(
            detect(
                0,
                None,
                env(&[("OMPI_COMM_WORLD_RANK", "4"), ("OMPI_COMM_WORLD_SIZE", "4")])
            )
            .is_err()
        );
    }
}
