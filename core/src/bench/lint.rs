//! Checks of a catalog entry beyond its syntax (called from
//! [`BenchmarkDef::check`]): contradictions that would otherwise surface only
//! when a run uses the entry, or never (a bound that can never be met, a check
//! threshold nobody reads). Each message names the field.
use std::collections::HashSet;

use super::{ArgTemplate, BenchmarkDef, ParamDef, ParamType, placeholders};

/// `check_*` parameters the verdicts read by their exact name (history
/// settings, per-node and per-rank checks, LinkTest slow pairs).
pub const CHECK_PARAMS: &[&str] = &[
    "check_window",
    "check_min_history",
    "check_mads",
    "check_node_write_bw_mib_s",
    "check_node_read_bw_mib_s",
    "check_node_min_fraction",
    "check_node_slow_pair_fraction",
    "check_rank_time_mads",
    "check_rank_time_min_excess",
    "check_rank_time_min_excess_s",
    "check_slow_pair_factor",
    "check_slow_pair_time_s",
    // The change-point detector (REGRESSION, docs/io.md "Regressions");
    // benchlake_analysis::changepoint::PARAMS.
    "check_changepoint",
    "check_changepoint_window",
    "check_changepoint_min_history",
    "check_changepoint_min_nights",
    "check_changepoint_score",
    "check_changepoint_min_step",
    // The link check (`link_health`, docs/verdicts.md "Links");
    // benchlake_analysis::link_checks::PARAMS.
    "check_link",
    "check_link_window",
    "check_link_min_history",
    "check_link_mads",
    "check_link_floor",
    "check_link_persist",
    "check_link_persist_floor",
];

/// Figures of the I/O, LinkTest and OSU checks: `check_<figure>` bounds one,
/// `check_<figure>_floor` (older name `_max_regression`) and
/// `check_<figure>_abs_floor` set the floors of its learned allowance.
/// (`check_mdtest_<operation>` names any mdtest operation.) The worker's
/// tests keep it equal to the rules of every check family
/// (`benchlake_worker::checks`).
pub const CHECK_FIGURES: &[&str] = &[
    "io_write_bw_mib_s",
    "io_read_bw_mib_s",
    "io_write_bw_min_mib_s",
    "io_read_bw_min_mib_s",
    "io_write_bw_cv",
    "io_read_bw_cv",
    "io_open_time_max_s",
    "io_verify_errors",
    "linktest_max_time_s",
    "linktest_avg_time_s",
    "linktest_slow_pairs",
    "linktest_pair_spread",
    "osu_latency_us",
    "osu_bw_mb_s",
    "osu_bibw_mb_s",
];

/// Whether `name` is a `check_*` parameter some verdict reads.
pub fn is_known_check(name: &str) -> bool {
    if CHECK_PARAMS.contains(&name) {
        return true;
    }
    let Some(rest) = name.strip_prefix("check_") else {
        return false;
    };
    let figure = ["_max_regression", "_abs_floor", "_floor"]
        .iter()
        .find_map(|s| rest.strip_suffix(s))
        .unwrap_or(rest);
    CHECK_FIGURES.contains(&figure)
        || figure.strip_prefix("mdtest_").is_some_and(|op| {
            !op.is_empty() && op.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
        })
}

fn env_name(k: &str) -> bool {
    let mut b = k.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

fn numeric(t: ParamType) -> bool {
    matches!(t, ParamType::Int | ParamType::Float | ParamType::Size)
}

fn param(p: &ParamDef) -> Result<(), String> {
    let n = &p.name;
    for (what, v) in [("min", p.min), ("max", p.max)] {
        if let Some(x) = v {
            if !numeric(p.ty) {
                return Err(format!(
                    "param '{n}': `{what}` applies to int, float and size parameters, not {}",
                    p.ty.as_str()
                ));
            }
            if !x.is_finite() {
                return Err(format!("param '{n}': `{what}` {x} is not a finite number"));
            }
        }
    }
    if let (Some(lo), Some(hi)) = (p.min, p.max)
        && lo > hi
    {
        return Err(format!(
            "param '{n}': `min` {lo} is above `max` {hi} (no value fits)"
        ));
    }
    if p.ty != ParamType::Choice && !p.choices.is_empty() {
        return Err(format!(
            "param '{n}': `choices` applies to choice parameters, not {}",
            p.ty.as_str()
        ));
    }
    let mut seen = HashSet::new();
    for c in &p.choices {
        if c.is_empty() {
            return Err(format!("param '{n}': `choices` holds an empty value"));
        }
        if !seen.insert(c.as_str()) {
            return Err(format!("param '{n}': `choices` lists '{c}' twice"));
        }
    }
    if p.optional && p.default.is_some() {
        return Err(format!(
            "param '{n}': has a `default` and `optional = true` (a default makes it always present; keep one)"
        ));
    }
    if n == "np" && p.ty != ParamType::Int {
        return Err(format!(
            "param 'np': must be of type int (it sets the process count), not {}",
            p.ty.as_str()
        ));
    }
    if n.starts_with("check_") {
        if !is_known_check(n) {
            return Err(format!(
                "param '{n}': unknown check (known: {}, check_<figure>, check_<figure>_floor, check_<figure>_abs_floor for {} and check_mdtest_<operation>)",
                CHECK_PARAMS.join(", "),
                CHECK_FIGURES.join(", ")
            ));
        }
        if !matches!(p.ty, ParamType::Int | ParamType::Float) {
            return Err(format!(
                "param '{n}': a check threshold is of type int or float, not {}",
                p.ty.as_str()
            ));
        }
    }
    Ok(())
}

/// The checks; the message is prefixed by the caller with the benchmark.
pub(super) fn lint(b: &BenchmarkDef) -> Result<(), String> {
    if let Some(ArgTemplate::Arg(prog)) = b.command.first() {
        if prog.trim().is_empty() {
            return Err("command: the program (first element) is empty".into());
        }
        if prog.chars().any(char::is_whitespace) {
            return Err(format!(
                "command: program '{prog}' contains whitespace; give each argument as an element of its own (no shell runs it)"
            ));
        }
    }
    for p in &b.params {
        param(p)?;
    }
    let absent = |name: &str| {
        b.params
            .iter()
            .any(|p| p.name == name && p.optional && p.default.is_none())
    };
    for a in &b.command {
        match a {
            ArgTemplate::Arg(s) => {
                for ph in placeholders(s)? {
                    if absent(&ph) {
                        return Err(format!(
                            "command: '{s}' uses optional parameter '{ph}', which may be absent; put it in a `{{ when = \"{ph}\", args = [...] }}` item"
                        ));
                    }
                }
            }
            ArgTemplate::When { when, args } => {
                if let Some(p) = b.params.iter().find(|p| &p.name == when)
                    && p.ty != ParamType::Bool
                    && !p.optional
                {
                    return Err(format!(
                        "command: `when = \"{when}\"` names a parameter that is always present (use a bool or an optional parameter)"
                    ));
                }
                for s in args {
                    for ph in placeholders(s)? {
                        if ph != *when && absent(&ph) {
                            return Err(format!(
                                "command: the `when = \"{when}\"` item uses optional parameter '{ph}', which may be absent when '{when}' is set"
                            ));
                        }
                    }
                }
            }
        }
    }
    if b.timeout_s == 0 {
        return Err("timeout_s: must be at least 1 second".into());
    }
    if b.max_timeout_s != 0 && b.max_timeout_s < b.timeout_s {
        return Err(format!(
            "max_timeout_s: {} is below timeout_s {}",
            b.max_timeout_s, b.timeout_s
        ));
    }
    let mut seen = HashSet::new();
    for l in &b.launchers {
        if !seen.insert(*l) {
            return Err(format!("launchers: '{}' twice", l.as_str()));
        }
    }
    let mut files = HashSet::new();
    for o in &b.outputs {
        if !files.insert(o.file.as_str()) {
            return Err(format!("output '{}': declared twice", o.file));
        }
        let f = &o.format;
        if f.is_empty()
            || f.len() > 64
            || !f
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-')
        {
            return Err(format!(
                "output '{}': format '{f}' must be 1-64 characters of [a-z0-9_-]",
                o.file
            ));
        }
    }
    for k in b.env.keys() {
        if !env_name(k) {
            return Err(format!(
                "env: '{k}' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)"
            ));
        }
    }
    if let Some(u) = &b.run_as
        && (u.starts_with('-') || u.bytes().all(|c| c.is_ascii_digit()))
    {
        return Err(format!(
            "run_as: '{u}' is not a user name (a name, not a number or an option)"
        ));
    }
    Ok(())
}
