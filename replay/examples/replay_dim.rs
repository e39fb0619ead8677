//! Replays a `.dim` trace with the Dimemas model and prints the per-rank breakdown.
//! Usage: replay_dim TRACE [key=value ...] (keys: see docs/replay.md).
use std::collections::BTreeMap;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(trace) = args.next() else {
        eprintln!("usage: replay_dim TRACE [key=value ...]");
        std::process::exit(2);
    };
    let params: BTreeMap<String, String> = args
        .filter_map(|a| {
            a.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect();
    match benchlake_replay::run_replay(
        benchlake_replay::models::DIMEMAS.name,
        std::path::Path::new(&trace),
        &params,
    ) {
        Ok(r) => {
            println!(
                "predicted {:.9} s, {} records",
                r.predicted_time_s, r.records
            );
            for rk in &r.ranks {
                println!(
                    "rank {} total {:.9} comp {:.9} comm {:.9} (wait {:.9} lat {:.9} small {:.9} big {:.9})",
                    rk.rank,
                    rk.total_s,
                    rk.computation_s,
                    rk.communication_s(),
                    rk.comm.wait,
                    rk.comm.latency,
                    rk.comm.small,
                    rk.comm.big
                );
                for (f, c) in &rk.functions {
                    println!(
                        "    {f:<14} wait {:.9} lat {:.9} small {:.9} big {:.9}",
                        c.wait, c.latency, c.small, c.big
                    );
                }
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
