//! `benchlake netprobe`: one rank of a netprobe run, as the built-in catalog
//! entry `netprobe` starts it on every selected agent (docs/linktest.md §7).
//! Ranks meet through rank 0 (rendezvous on a port derived from the run id);
//! rank 0 writes the LinkTest 2.1.17 SION file.
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
    let message_size = benchlake_core::bench::parse_size(&a.message_size)
        .with_context(|| format!("--message-size '{}' is not a size", a.message_size))?;
    let direction = Direction::parse(&a.direction).with_context(|| {
        format!(
            "--direction '{}' is not pingpong, unidirectional or bidirectional",
            a.direction
        )
    })?;
    let params = Params {
        num_messages: a.num_messages,
        message_size: usize::try_from(message_size).context("--message-size too large")?,
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
    let rv = Rendezvous {
        run_id: a.run_id.clone(),
        hosts: a.hosts.iter().map(|h| h.trim().to_string()).collect(),
        ports: candidate_ports(&a.run_id, a.port_base, a.port_span, a.port_tries),
        timeout: Duration::from_secs(a.rendezvous_timeout_s.max(1)),
    };
    tracing::info!(rank = a.rank, ranks = n, run = %a.run_id, "netprobe starting");
    let res = benchlake_netprobe::run_rendezvous(a.rank, &rv, &params, &a.out)
        .with_context(|| format!("netprobe rank {} of {n}", a.rank))?;
    if let Some(run) = res {
        for (k, p) in run.permutations.iter().enumerate() {
            println!(
                "netprobe iteration {k}: {n} ranks, {} B x {}: min {:.3} us, avg {:.3} us, max {:.3} us",
                params.message_size,
                params.num_messages,
                p.min_time_s * 1e6,
                p.avg_time_s * 1e6,
                p.max_time_s * 1e6
            );
            for s in &p.slow_links {
                println!(
                    "  slow pair {} -> {}: {:.3} us, retest {:.3} us",
                    s.from_rank,
                    s.to_rank,
                    s.time_s * 1e6,
                    s.retest_time_s.unwrap_or(0.0) * 1e6
                );
            }
        }
        println!("netprobe wrote {}", a.out.display());
    }
    Ok(())
}
