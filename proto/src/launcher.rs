//! The launcher mapped once: the domain's [`LauncherKind`] (catalog entries,
//! run specs; its lower-case names live with it in `benchlake-core`) and the
//! protocol's [`Launcher`] enum. The coordinator, the agent and the CLI
//! convert here and nowhere else; a value with no launcher behind it (a newer
//! peer's, or garbage) is an [`UnknownLauncher`] error, never a silent
//! default.
use benchlake_core::bench::LauncherKind;
use benchlake_core::slurm::SlurmOptions;

use crate::v1::Launcher;

/// A protocol launcher value that names no launcher this build knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unknown launcher value {0} (known: {known})", known = LauncherKind::known())]
pub struct UnknownLauncher(pub i32);

impl From<LauncherKind> for Launcher {
    fn from(l: LauncherKind) -> Self {
        match l {
            LauncherKind::Local => Launcher::Local,
            LauncherKind::Mpirun => Launcher::Mpirun,
            LauncherKind::Srun => Launcher::Srun,
            LauncherKind::Sbatch => Launcher::Sbatch,
        }
    }
}

/// The protocol value of a launcher.
pub fn to_pb(l: LauncherKind) -> i32 {
    Launcher::from(l) as i32
}

/// The launcher of a protocol value: `None` for `LAUNCHER_UNSPECIFIED` (the
/// catalog entry's default, which only the caller knows), an error for a
/// value that names no launcher.
pub fn from_pb(v: i32) -> Result<Option<LauncherKind>, UnknownLauncher> {
    match Launcher::try_from(v) {
        Ok(Launcher::Unspecified) => Ok(None),
        Ok(Launcher::Local) => Ok(Some(LauncherKind::Local)),
        Ok(Launcher::Mpirun) => Ok(Some(LauncherKind::Mpirun)),
        Ok(Launcher::Srun) => Ok(Some(LauncherKind::Srun)),
        Ok(Launcher::Sbatch) => Ok(Some(LauncherKind::Sbatch)),
        Err(_) => Err(UnknownLauncher(v)),
    }
}

/// The protocol value of a launcher name (any case; see
/// [`LauncherKind::parse`]), `None` when no launcher has that name.
pub fn parse_to_pb(name: &str) -> Option<i32> {
    LauncherKind::parse(name).map(to_pb)
}

/// The domain's Slurm options of a protocol message (absent = none set).
pub fn slurm_from_pb(o: Option<&crate::v1::SlurmOptions>) -> SlurmOptions {
    let Some(o) = o else {
        return SlurmOptions::default();
    };
    SlurmOptions {
        nodes: o.nodes,
        ntasks_per_node: o.ntasks_per_node,
        partition: o.partition.clone(),
        time_limit_min: o.time_limit_min,
        nodelist: o.nodelist.clone(),
        account: o.account.clone(),
        qos: o.qos.clone(),
        reservation: o.reservation.clone(),
        constraint: o.constraint.clone(),
        queue_timeout_s: o.queue_timeout_s,
    }
}

/// The protocol message of Slurm options (None when none is set).
pub fn slurm_to_pb(o: &SlurmOptions) -> Option<crate::v1::SlurmOptions> {
    (!o.is_empty()).then(|| crate::v1::SlurmOptions {
        nodes: o.nodes,
        ntasks_per_node: o.ntasks_per_node,
        partition: o.partition.clone(),
        time_limit_min: o.time_limit_min,
        nodelist: o.nodelist.clone(),
        account: o.account.clone(),
        qos: o.qos.clone(),
        reservation: o.reservation.clone(),
        constraint: o.constraint.clone(),
        queue_timeout_s: o.queue_timeout_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_launcher_round_trips() {
        for l in LauncherKind::ALL {
            assert_eq!(from_pb(to_pb(l)), Ok(Some(l)));
            assert_eq!(parse_to_pb(l.as_str()), Some(to_pb(l)));
        }
        assert_eq!(from_pb(Launcher::Unspecified as i32), Ok(None));
        // Every protocol value but UNSPECIFIED has a launcher.
        for v in 1..=4 {
            assert!(matches!(from_pb(v), Ok(Some(_))), "{v}");
        }
    }

    #[test]
    fn unknown_values_are_errors_naming_the_value() {
        assert_eq!(from_pb(7), Err(UnknownLauncher(7)));
        assert_eq!(
            UnknownLauncher(-1).to_string(),
            "unknown launcher value -1 (known: local, mpirun, srun, sbatch)"
        );
        assert_eq!(parse_to_pb("pbsdsh"), None);
    }

    #[test]
    fn slurm_options_round_trip() {
        let o = SlurmOptions {
            nodes: 3,
            ntasks_per_node: 2,
            partition: "p".into(),
            time_limit_min: 5,
            nodelist: vec!["n[1-3]".into()],
            account: "a".into(),
            qos: "q".into(),
            reservation: "r".into(),
            constraint: "ib&nvme".into(),
            queue_timeout_s: 600,
        };
        assert_eq!(slurm_from_pb(slurm_to_pb(&o).as_ref()), o);
        assert_eq!(slurm_to_pb(&SlurmOptions::default()), None);
        assert_eq!(slurm_from_pb(None), SlurmOptions::default());
    }
}
