//! A node's identity: the one rule every table, check, drain and page uses
//! to name the machine a measurement came from (docs/tables.md, "Node
//! identity").
//!
//! 1. the **Slurm node name** (`SLURMD_NODENAME`, which slurmd sets in every
//!    task it starts) when Slurm ran the process: several Slurm nodes may
//!    share a host name, and drains and `node-check` speak Slurm's names;
//! 2. else the **agent's node name** (`BENCHLAKE_NODE`, which the agent sets
//!    to its configured `--name` in every task it starts);
//! 3. else the kernel's **host name** (a tool run by hand, outside both).
//!
//! The host name itself is kept as a fact beside the node where a table has
//! room for it (`node_facts.hostname`, `io_task_times.hostname`, …).
//!
//! The C tracer applies the same rule in `tracer/c/bl_finalize.c`.

/// Set by slurmd in every task: the Slurm node name.
pub const SLURM_VAR: &str = "SLURMD_NODENAME";
/// Set by the agent in every task it starts: its configured node name.
pub const AGENT_VAR: &str = "BENCHLAKE_NODE";

/// Longest node name accepted (Slurm's own limit is lower in practice).
pub const MAX_NAME: usize = 128;

/// Whether `name` is a usable node name: letters, digits, `_ - .`, not
/// starting with `-`, at most [`MAX_NAME`] bytes.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// The Slurm node name of this process, when Slurm ran it and the name is
/// valid.
pub fn slurm_name() -> Option<String> {
    from_var(&|k| std::env::var(k).ok(), SLURM_VAR)
}

/// This process's node by the rule of this module.
pub fn name() -> String {
    name_from(&|k| std::env::var(k).ok(), hostname)
}

/// The kernel's host name (`/proc/sys/kernel/hostname`, else `HOSTNAME`,
/// else `localhost`).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into())
}

fn from_var(env: &dyn Fn(&str) -> Option<String>, key: &str) -> Option<String> {
    env(key)
        .map(|v| v.trim().to_string())
        .filter(|v| valid_name(v))
}

/// [`name`] over a given environment and host name (for tests).
pub fn name_from(env: &dyn Fn(&str) -> Option<String>, host: impl FnOnce() -> String) -> String {
    from_var(env, SLURM_VAR)
        .or_else(|| from_var(env, AGENT_VAR))
        .unwrap_or_else(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(kv: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| kv.iter().find(|(a, _)| *a == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn slurm_then_agent_then_host() {
        let host = || "vm".to_string();
        assert_eq!(name_from(&env(&[]), host), "vm");
        assert_eq!(name_from(&env(&[(AGENT_VAR, "a1")]), host), "a1");
        assert_eq!(
            name_from(&env(&[(AGENT_VAR, "a1"), (SLURM_VAR, "n2")]), host),
            "n2"
        );
        // Blank or unusable values are passed over, not recorded.
        assert_eq!(
            name_from(&env(&[(AGENT_VAR, " "), (SLURM_VAR, "-x")]), host),
            "vm"
        );
        assert_eq!(
            name_from(&env(&[(AGENT_VAR, "a 1"), (SLURM_VAR, "")]), host),
            "vm"
        );
        assert_eq!(name_from(&env(&[(SLURM_VAR, " n3 ")]), host), "n3");
    }

    #[test]
    fn names_are_checked() {
        assert!(valid_name("n001.cluster-a_b"));
        assert!(!valid_name(""));
        assert!(!valid_name("-n"));
        assert!(!valid_name("a/b"));
        assert!(!valid_name(&"n".repeat(MAX_NAME + 1)));
    }
}
