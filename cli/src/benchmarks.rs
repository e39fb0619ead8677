//! `benchlake benchmarks list|show|builtin`: the catalog as the coordinator
//! knows it from the agents' registrations (issue 35, item 7), and the
//! built-in catalog file to start a site's own.

use benchlake_core::outln;
use benchlake_proto::v1 as pb;
use clap::Subcommand;

use crate::user::Conn;

#[derive(Debug, Subcommand)]
pub enum BenchmarksCmd {
    /// Every benchmark the agents offer: kind, launchers, which agents offer
    /// it and which refuse it.
    List {
        #[command(flatten)]
        conn: Conn,
    },
    /// One benchmark: its parameters (type, default, limits, choices,
    /// allowed directories), check parameters, launchers, timeouts, outputs,
    /// the agents that offer it and those that refuse it, with why.
    Show {
        #[command(flatten)]
        conn: Conn,
        /// The benchmark's catalog name.
        name: String,
    },
    /// Print the built-in catalog file (TOML), to start a site's own
    /// (`benchlake agent --catalog FILE`; docs/configuration.md).
    Builtin,
}

pub async fn benchmarks_cmd(c: BenchmarksCmd) -> anyhow::Result<()> {
    match c {
        BenchmarksCmd::Builtin => {
            benchlake_core::out!("{}", benchlake_agent::BUILTIN_CATALOG_TOML);
            Ok(())
        }
        BenchmarksCmd::List { conn } => {
            let offers = list(&conn, "").await?;
            if conn.json {
                return print_json(&offers.iter().map(offer_json).collect::<Vec<_>>());
            }
            if offers.is_empty() {
                outln!("no agent has registered a benchmark");
            }
            for o in &offers {
                let d = o.def.clone().unwrap_or_default();
                outln!(
                    "{:<20} {:<10} {:<25} offered by {}{}",
                    d.name,
                    d.kind,
                    if d.launchers.is_empty() {
                        "-".to_string()
                    } else {
                        d.launchers.join(",")
                    },
                    names(&o.agents),
                    if o.refused.is_empty() {
                        String::new()
                    } else {
                        format!(
                            "; refused by {}",
                            names(
                                &o.refused
                                    .iter()
                                    .map(|r| r.agent.clone())
                                    .collect::<Vec<_>>()
                            )
                        )
                    }
                );
            }
            Ok(())
        }
        BenchmarksCmd::Show { conn, name } => {
            let offers = list(&conn, &name).await?;
            let Some(o) = offers.into_iter().next() else {
                anyhow::bail!("no agent's catalog has a benchmark '{name}'");
            };
            if conn.json {
                return print_json(&offer_json(&o));
            }
            show(&o);
            Ok(())
        }
    }
}

async fn list(conn: &Conn, name: &str) -> anyhow::Result<Vec<pb::BenchmarkOffer>> {
    Ok(conn
        .cluster()?
        .list_benchmarks(pb::ListBenchmarksRequest { name: name.into() })
        .await?
        .into_inner()
        .benchmarks)
}

fn names(v: &[String]) -> String {
    if v.is_empty() {
        "no agent".into()
    } else {
        v.join(", ")
    }
}

fn print_json<T: serde::Serialize>(v: &T) -> anyhow::Result<()> {
    outln!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

fn param_json(p: &pb::ParamDef) -> serde_json::Value {
    serde_json::json!({
        "name": p.name, "type": p.r#type, "default": p.default, "optional": p.optional,
        "min": p.min, "max": p.max, "choices": p.choices, "within": p.within,
        "description": p.description,
    })
}

fn offer_json(o: &pb::BenchmarkOffer) -> serde_json::Value {
    let d = o.def.clone().unwrap_or_default();
    serde_json::json!({
        "name": d.name, "kind": d.kind, "description": d.description,
        "launchers": d.launchers, "run_as": d.run_as, "timeout_s": d.timeout_s, "max_timeout_s": d.max_timeout_s,
        "params": d.params.iter().map(param_json).collect::<Vec<_>>(),
        "outputs": d.outputs.iter().map(|x| serde_json::json!({
            "file": x.file, "format": x.format, "required": x.required})).collect::<Vec<_>>(),
        "agents": o.agents,
        "refused": o.refused.iter().map(|r| serde_json::json!({
            "agent": r.agent, "reason": r.reason})).collect::<Vec<_>>(),
        "definitions_differ": o.definitions_differ,
    })
}

/// What a parameter accepts, in one line (`int 1..=3600, default 120`).
fn accepts(p: &pb::ParamDef) -> String {
    let mut s = p.r#type.clone();
    match (p.min, p.max) {
        (Some(a), Some(b)) => s.push_str(&format!(" {a}..={b}")),
        (Some(a), None) => s.push_str(&format!(" >= {a}")),
        (None, Some(b)) => s.push_str(&format!(" <= {b}")),
        (None, None) => {}
    }
    if !p.choices.is_empty() {
        s.push_str(&format!(" [{}]", p.choices.join("|")));
    }
    if !p.within.is_empty() {
        s.push_str(&format!(" within {}", p.within.join(", ")));
    }
    match (&p.default, p.optional) {
        (Some(d), _) => s.push_str(&format!(", default {d}")),
        (None, true) => s.push_str(", optional"),
        (None, false) => s.push_str(", required"),
    }
    s
}

fn show(o: &pb::BenchmarkOffer) {
    let d = o.def.clone().unwrap_or_default();
    outln!(
        "{} ({})",
        d.name,
        if d.kind.is_empty() { "?" } else { &d.kind }
    );
    if !d.description.is_empty() {
        outln!("  {}", d.description);
    }
    if o.agents.is_empty() {
        outln!("offered by: no agent");
    } else {
        outln!(
            "launchers: {} (default {})",
            d.launchers.join(", "),
            d.launchers.first().map(String::as_str).unwrap_or("local")
        );
        outln!(
            "runs as: {}",
            d.run_as.as_deref().unwrap_or("the agent's own user")
        );
        outln!(
            "timeout: {} s{}",
            d.timeout_s,
            if d.max_timeout_s > d.timeout_s {
                format!(" (at most {} s)", d.max_timeout_s)
            } else {
                String::new()
            }
        );
        let (checks, params): (Vec<&pb::ParamDef>, Vec<&pb::ParamDef>) =
            d.params.iter().partition(|p| p.name.starts_with("check_"));
        for (title, list) in [("parameters", params), ("check parameters", checks)] {
            if list.is_empty() {
                continue;
            }
            outln!("{title}:");
            for p in list {
                outln!("  {:<28} {}", p.name, accepts(p));
                if !p.description.is_empty() {
                    outln!("  {:<28}   {}", "", p.description);
                }
            }
        }
        if !d.outputs.is_empty() {
            outln!("outputs:");
            for x in &d.outputs {
                outln!(
                    "  {:<28} {}{}",
                    x.file,
                    x.format,
                    if x.required { ", required" } else { "" }
                );
            }
        }
        outln!("offered by: {}", o.agents.join(", "));
        if o.definitions_differ {
            outln!(
                "  (the agents registered different definitions; shown: {}'s)",
                o.agents[0]
            );
        }
    }
    for r in &o.refused {
        outln!("refused by {}: {}", r.agent, r.reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parameter_says_what_it_accepts() {
        let p = pb::ParamDef {
            name: "timeout_s".into(),
            r#type: "int".into(),
            default: Some("120".into()),
            min: Some(1.0),
            max: Some(3600.0),
            ..Default::default()
        };
        assert_eq!(accepts(&p), "int 1..=3600, default 120");
        let c = pb::ParamDef {
            name: "pattern".into(),
            r#type: "choice".into(),
            choices: vec!["segmented".into(), "strided".into()],
            ..Default::default()
        };
        assert_eq!(accepts(&c), "choice [segmented|strided], required");
    }
}
