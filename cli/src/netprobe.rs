//! `benchlake netprobe`: one rank of a netprobe run, as the built-in catalog
//! entry `netprobe` starts it on every selected agent (docs/linktest.md §7).
//! Ranks meet through rank 0 (rendezvous on a port derived from the run id);
//! rank 0 writes the LinkTest 2.1.17 SION file.
//!
//! Two additions for calibrating the replay models (docs/replay.md): a
//! **size sweep** (`--message-sizes 8,16k,1MiB`: one measurement per size,
//! one SION file per size, `OUT` with `_<bytes>B` before its extension), so
//! one run gives the calibrate job what a latency and a bandwidth need; and
//! **local ranks** (`--local-ranks N`): a run of one agent measures N ranks
//! as threads of this process (the pairs of one host, which is what an
//! intra-node calibration needs), without any rendezvous. Their ping-pongs
//! go through shared memory by default (`--transport shm`), as MPI carries
//! messages between ranks of one host; `--transport tcp` measures loopback
//! TCP instead (ten times MPI's latency on one host, docs/linktest.md §7.3).
use benchlake_core::outln;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use benchlake_netprobe::{Direction, Params, Rendezvous, candidate_ports, run_hash};
use clap::{ArgAction, Args};

/// `benchlake netprobe`.
#[derive(Debug, Clone, Args)]
pub struct NetprobeArgs {
    /// This rank (0 = the one that gathers and writes the file).
    #[arg(long, env = "BENCHLAKE_NETPROBE_RANK")]
    pub rank: usize,
    /// Advertised address (host name or IP) of every rank, in rank order.
    #[arg(
        long,
        env = "BENCHLAKE_NETPROBE_HOSTS",
        value_delimiter = ',',
        required = true
    )]
    pub hosts: Vec<String>,
    /// Number of ranks (checked against --hosts).
    #[arg(long, env = "BENCHLAKE_NETPROBE_NUM_TASKS")]
    pub num_tasks: Option<usize>,
    /// Run id: the same on every rank of the run (set by the agent).
    #[arg(long, env = "BENCHLAKE_RUN_ID")]
    pub run_id: String,
    /// The SION file rank 0 writes.
    #[arg(
        long,
        env = "BENCHLAKE_NETPROBE_OUT",
        default_value = "pingpong_results_bin.sion"
    )]
    pub out: PathBuf,
    /// Timed messages per pair and direction.
    #[arg(long, env = "BENCHLAKE_NETPROBE_NUM_MESSAGES", default_value_t = 100)]
    pub num_messages: u64,
    /// Bytes per message (a size: 1024, 64k, 1MiB).
    #[arg(long, env = "BENCHLAKE_NETPROBE_MESSAGE_SIZE", default_value = "1024")]
    pub message_size: String,
    /// A size sweep instead of --message-size: comma-separated sizes
    /// (`8,16k,1MiB`, at most 16), measured one after the other; rank 0
    /// writes one file per size, `OUT` with `_<bytes>B` before its extension.
    #[arg(long, env = "BENCHLAKE_NETPROBE_MESSAGE_SIZES")]
    pub message_sizes: Option<String>,
    /// Ranks measured as threads of this process over loopback (2..=64);
    /// needs a run of one host (--hosts with one address). 1 = the usual
    /// one rank per process.
    #[arg(long, env = "BENCHLAKE_NETPROBE_LOCAL_RANKS", default_value_t = 1)]
    pub local_ranks: usize,
    /// How local ranks exchange their ping-pongs: `shm` (shared memory, as
    /// MPI between ranks of one host; ping-pong only) or `tcp` (loopback).
    /// Ranks on several hosts always use TCP.
    #[arg(long, env = "BENCHLAKE_NETPROBE_TRANSPORT", default_value = "shm")]
    pub transport: String,
    /// Untimed messages before the timed ones.
    #[arg(long, env = "BENCHLAKE_NETPROBE_WARMUP_MESSAGES", default_value_t = 10)]
    pub warmup_messages: u64,
    /// pingpong, unidirectional or bidirectional.
    #[arg(long, env = "BENCHLAKE_NETPROBE_DIRECTION", default_value = "pingpong")]
    pub direction: String,
    /// Serial mode: one pair at a time.
    #[arg(long, env = "BENCHLAKE_NETPROBE_SERIAL", action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    pub serial: bool,
    /// All-to-all phase in every iteration.
    #[arg(long, env = "BENCHLAKE_NETPROBE_ALL_TO_ALL", action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    pub all_to_all: bool,
    /// Barrier between steps (parallel mode).
    #[arg(long, env = "BENCHLAKE_NETPROBE_BARRIERS", action = ArgAction::Set, num_args = 0..=1, default_value_t = true, default_missing_value = "true")]
    pub barriers: bool,
    /// Run the steps in a seeded random order.
    #[arg(long, env = "BENCHLAKE_NETPROBE_RANDOMIZE_STEPS", action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    pub randomize_steps: bool,
    /// Extra iterations with a seeded random rank placement.
    #[arg(long, env = "BENCHLAKE_NETPROBE_RANDOMIZED_TASKS", default_value_t = 0)]
    pub randomized_tasks: u64,
    /// Seed of step orders and placements (default: derived from the run id).
    #[arg(long, env = "BENCHLAKE_NETPROBE_SEED")]
    pub seed: Option<u64>,
    /// Slowest pairs of each iteration retested one at a time.
    #[arg(long, env = "BENCHLAKE_NETPROBE_SERIAL_RETESTS", default_value_t = 10)]
    pub serial_retests: usize,
    /// Host name recorded for this rank (default: the kernel's host name).
    #[arg(long, env = "BENCHLAKE_NETPROBE_HOSTNAME")]
    pub hostname: Option<String>,
    /// First port of rank 0's rendezvous range.
    #[arg(long, env = "BENCHLAKE_NETPROBE_PORT_BASE", default_value_t = 47100)]
    pub port_base: u16,
    /// Size of rank 0's rendezvous port range.
    #[arg(long, env = "BENCHLAKE_NETPROBE_PORT_SPAN", default_value_t = 1000)]
    pub port_span: u16,
    /// Candidate ports tried in that range.
    #[arg(long, env = "BENCHLAKE_NETPROBE_PORT_TRIES", default_value_t = 16)]
    pub port_tries: usize,
    /// How long rank 0 waits for every rank (and the ranks for rank 0), seconds.
    #[arg(
        long,
        env = "BENCHLAKE_NETPROBE_RENDEZVOUS_TIMEOUT_S",
        default_value_t = 120
    )]
    pub rendezvous_timeout_s: u64,
    /// Socket read/write timeout once connected, seconds.
    #[arg(long, env = "BENCHLAKE_NETPROBE_IO_TIMEOUT_S", default_value_t = 300)]
    pub io_timeout_s: u64,
}

/// Most sizes in one sweep.
pub const MAX_SWEEP: usize = 16;
/// Most local ranks.
pub const MAX_LOCAL_RANKS: usize = 64;

/// The sizes to measure: the sweep's (in the order given, no duplicates) or
/// `--message-size`.
fn sizes_of(a: &NetprobeArgs) -> anyhow::Result<Vec<usize>> {
    let parse = |flag: &str, s: &str| -> anyhow::Result<usize> {
        let v = benchlake_core::bench::parse_size(s.trim())
            .with_context(|| format!("{flag} '{s}' is not a size"))?;
        usize::try_from(v).with_context(|| format!("{flag} '{s}' is too large"))
    };
    let Some(list) = &a.message_sizes else {
        return Ok(vec![parse("--message-size", &a.message_size)?]);
    };
    let mut out = Vec::new();
    for part in list.split(',') {
        let v = parse("--message-sizes", part)?;
        if out.contains(&v) {
            bail!("--message-sizes '{list}' lists {v} bytes twice");
        }
        out.push(v);
    }
    if out.len() > MAX_SWEEP {
        bail!(
            "--message-sizes '{list}' lists {} sizes (at most {MAX_SWEEP})",
            out.len()
        );
    }
    Ok(out)
}

/// The file of one size of a sweep: `dir/name_<bytes>B.ext` (`OUT` itself
/// when one size is measured).
pub fn sweep_path(out: &std::path::Path, size: usize, sweep: bool) -> PathBuf {
    if !sweep {
        return out.to_path_buf();
    }
    let stem = out
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match out.extension() {
        Some(e) => format!("{stem}_{size}B.{}", e.to_string_lossy()),
        None => format!("{stem}_{size}B"),
    };
    out.with_file_name(name)
}

/// Runs one rank; rank 0 prints a summary line.
pub fn netprobe(a: NetprobeArgs) -> anyhow::Result<()> {
    let n = a.hosts.len();
    if let Some(k) = a.num_tasks
        && k != n
    {
        bail!("--num-tasks {k} but --hosts lists {n} addresses");
    }
    if a.hosts.iter().any(|h| h.trim().is_empty()) {
        bail!("--hosts has an empty address");
    }
    if a.local_ranks == 0 || a.local_ranks > MAX_LOCAL_RANKS {
        bail!(
            "--local-ranks {} is out of range (1 to {MAX_LOCAL_RANKS})",
            a.local_ranks
        );
    }
    let shm = match a.transport.as_str() {
        "shm" => a.local_ranks > 1,
        "tcp" => false,
        t => bail!("--transport '{t}' is not shm or tcp"),
    };
    if a.local_ranks > 1 && (n != 1 || a.rank != 0) {
        bail!(
            "--local-ranks {} measures ranks of one host: --hosts must list one address (it lists {n}) and --rank be 0",
            a.local_ranks
        );
    }
    let sizes = sizes_of(&a)?;
    let sweep = a.message_sizes.is_some();
    let direction = Direction::parse(&a.direction).with_context(|| {
        format!(
            "--direction '{}' is not pingpong, unidirectional or bidirectional",
            a.direction
        )
    })?;
    let base = Params {
        num_messages: a.num_messages,
        message_size: sizes[0],
        warmup_messages: a.warmup_messages,
        direction,
        serial: a.serial,
        all_to_all: a.all_to_all,
        barriers: a.barriers,
        randomize_steps: a.randomize_steps,
        randomized_tasks: a.randomized_tasks,
        // Recorded in the file: an unseeded run is still reproducible.
        seed: a.seed.unwrap_or_else(|| run_hash(&a.run_id) >> 1),
        serial_retests: a.serial_retests,
        hostname: a.hostname.clone(),
        connect_timeout: Duration::from_secs(a.rendezvous_timeout_s.max(1)),
        io_timeout: Duration::from_secs(a.io_timeout_s.max(1)),
    };
    // Every size is checked before anything is measured.
    let ranks = if a.local_ranks > 1 { a.local_ranks } else { n };
    for s in &sizes {
        Params {
            message_size: *s,
            ..base.clone()
        }
        .validate(ranks)
        .with_context(|| format!("netprobe rank {} of {ranks}", a.rank))?;
    }
    for (i, size) in sizes.iter().enumerate() {
        let params = Params {
            message_size: *size,
            ..base.clone()
        };
        let out = sweep_path(&a.out, *size, sweep);
        // A sweep's sizes meet on ports of their own: a rank still in the
        // previous size never talks to the next size's rank 0.
        let run_id = if sweep && i > 0 {
            format!("{}-{size}", a.run_id)
        } else {
            a.run_id.clone()
        };
        let res = if a.local_ranks > 1 {
            tracing::info!(ranks, size, run = %a.run_id, "netprobe starting (local ranks)");
            local_ranks(ranks, &params, &out, shm)?
        } else {
            let rv = Rendezvous {
                run_id: run_id.clone(),
                hosts: a.hosts.iter().map(|h| h.trim().to_string()).collect(),
                ports: candidate_ports(&run_id, a.port_base, a.port_span, a.port_tries),
                timeout: Duration::from_secs(a.rendezvous_timeout_s.max(1)),
            };
            tracing::info!(rank = a.rank, ranks = n, size, run = %a.run_id, "netprobe starting");
            benchlake_netprobe::run_rendezvous(a.rank, &rv, &params, &out)
                .with_context(|| format!("netprobe rank {} of {n}", a.rank))?
        };
        if let Some(run) = res {
            report(&run, &params, ranks, &out);
        }
    }
    Ok(())
}

/// `ranks` ranks as threads of this process (`--local-ranks`), their
/// ping-pongs through shared memory (`shm`) or loopback TCP: rank 0's run.
fn local_ranks(
    ranks: usize,
    params: &Params,
    out: &std::path::Path,
    shm: bool,
) -> anyhow::Result<Option<benchlake_formats::linktest::LinkTestRun>> {
    let links = shm.then(|| {
        std::sync::Arc::new(benchlake_netprobe::ShmLinks::new(
            ranks,
            params.message_size,
            params.io_timeout,
        ))
    });
    let mut listeners = Vec::with_capacity(ranks);
    for _ in 0..ranks {
        listeners
            .push(std::net::TcpListener::bind("127.0.0.1:0").context("binding a loopback port")?);
    }
    let peers = listeners
        .iter()
        .map(|l| l.local_addr())
        .collect::<Result<Vec<_>, _>>()
        .context("loopback listener address")?;
    std::thread::scope(|s| {
        let handles: Vec<_> = listeners
            .into_iter()
            .enumerate()
            .map(|(r, l)| {
                let peers = peers.clone();
                let links = links.clone();
                s.spawn(move || match links {
                    Some(links) => {
                        benchlake_netprobe::run_with_shared_memory(r, l, peers, params, out, links)
                    }
                    None => benchlake_netprobe::run_with_listener(r, l, peers, params, out),
                })
            })
            .collect();
        let mut run = None;
        let mut first_err = None;
        for (r, h) in handles.into_iter().enumerate() {
            match h.join() {
                Ok(Ok(Some(x))) => run = Some(x),
                Ok(Ok(None)) => {}
                Ok(Err(e)) => {
                    first_err
                        .get_or_insert_with(|| anyhow::anyhow!("netprobe local rank {r}: {e}"));
                }
                Err(_) => {
                    first_err
                        .get_or_insert_with(|| anyhow::anyhow!("netprobe local rank {r} panicked"));
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(run),
        }
    })
}

fn report(
    run: &benchlake_formats::linktest::LinkTestRun,
    params: &Params,
    n: usize,
    out: &std::path::Path,
) {
    for (k, p) in run.permutations.iter().enumerate() {
        outln!(
            "netprobe iteration {k}: {n} ranks, {} B x {}: min {:.3} us, avg {:.3} us, max {:.3} us",
            params.message_size,
            params.num_messages,
            p.min_time_s * 1e6,
            p.avg_time_s * 1e6,
            p.max_time_s * 1e6
        );
        for s in &p.slow_links {
            outln!(
                "  slow pair {} -> {}: {:.3} us, retest {:.3} us",
                s.from_rank,
                s.to_rank,
                s.time_s * 1e6,
                s.retest_time_s.unwrap_or(0.0) * 1e6
            );
        }
    }
    outln!("netprobe wrote {}", out.display());
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: NetprobeArgs,
    }

    fn args(extra: &[&str]) -> NetprobeArgs {
        let mut v = vec!["x", "--rank=0", "--run-id=01JD3Q6Z5YV9C2M4T8N0R7K1PX"];
        if !extra.iter().any(|a| a.starts_with("--hosts")) {
            v.push("--hosts=h");
        }
        v.extend_from_slice(extra);
        Cli::try_parse_from(v).unwrap().a
    }

    #[test]
    fn sweep_sizes_and_files() {
        let a = args(&["--message-sizes=8,16k, 1MiB"]);
        assert_eq!(sizes_of(&a).unwrap(), vec![8, 16384, 1 << 20]);
        assert_eq!(
            sizes_of(&args(&["--message-size=64k"])).unwrap(),
            vec![65536]
        );
        let e = sizes_of(&args(&["--message-sizes=8,8"])).unwrap_err();
        assert!(e.to_string().contains("8 bytes twice"), "{e}");
        let e = sizes_of(&args(&["--message-sizes=8,,9"])).unwrap_err();
        assert!(format!("{e:#}").contains("is not a size"), "{e:#}");
        let many = (1..=17)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let e = sizes_of(&args(&[&format!("--message-sizes={many}")])).unwrap_err();
        assert!(e.to_string().contains("17 sizes"), "{e}");
        let out = std::path::Path::new("/o/pingpong_results_bin.sion");
        assert_eq!(
            sweep_path(out, 8, true),
            std::path::Path::new("/o/pingpong_results_bin_8B.sion")
        );
        assert_eq!(sweep_path(out, 8, false), out);
    }

    #[test]
    fn local_ranks_need_one_host_and_rank_0() {
        let e = netprobe(args(&["--local-ranks=2", "--hosts=a,b", "--num-tasks=2"])).unwrap_err();
        assert!(e.to_string().contains("one address"), "{e}");
        let e = netprobe(args(&["--local-ranks=0"])).unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
        // One rank without local ranks: netprobe's own bound.
        let e = netprobe(args(&["--message-sizes=8,1k"])).unwrap_err();
        assert!(format!("{e:#}").contains("2 to"), "{e:#}");
    }

    #[test]
    fn local_ranks_sweep_writes_one_file_per_size() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("pp.sion");
        let o = format!("--out={}", out.display());
        netprobe(args(&[
            "--local-ranks=3",
            "--message-sizes=8,64k",
            "--num-messages=5",
            "--warmup-messages=1",
            "--serial-retests=0",
            &o,
        ]))
        .unwrap();
        for (size, name) in [(8, "pp_8B.sion"), (65536, "pp_65536B.sion")] {
            let run = benchlake_formats::linktest::read_file(&dir.path().join(name)).unwrap();
            assert_eq!(run.num_tasks, 3);
            assert_eq!(run.message_size, size);
            let p = &run.permutations[0];
            assert!(p.min_time_s > 0.0 && p.max_time_s < 1.0, "{p:?}");
        }
        assert!(!out.exists());
    }
}
