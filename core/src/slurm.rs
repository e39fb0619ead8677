//! What a run asks of Slurm: node count, tasks per node, partition, time
//! limit, node list, account, QoS, reservation (docs/slurm.md).
//!
//! The same options serve the `srun` launcher and, later, batch mode: both
//! take the allocation options as the long options `srun` and `sbatch` share
//! ([`SlurmOptions::alloc_args`]). A spec's options come first, the catalog
//! entry's `slurm` table fills what the spec leaves unset
//! ([`SlurmOptions::or`]), Slurm's own defaults the rest.
//!
//! Every name is checked for its characters ([`SlurmOptions::validate`]) by
//! the coordinator when the spec arrives and by the agent before it builds
//! the argument vector; a value is always one `--option=value` argument,
//! never part of a shell string.
use serde::{Deserialize, Serialize};

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
    /// `--nodelist`: Slurm node names or ranges (`n[1-3]`); empty = Slurm
    /// places the tasks.
    pub nodelist: Vec<String>,
    /// `--account`.
    pub account: String,
    /// `--qos`.
    pub qos: String,
    /// `--reservation`.
    pub reservation: String,
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
        a
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
