//! What a replay produces, whatever the model: per-rank time breakdown (Bandela's
//! identity: communication = wait + latency + small + big), per-routine breakdown,
//! transfer matrix, adapter statistics and an optional timeline.
use std::collections::BTreeMap;

use serde::Serialize;

/// Messages up to this size are "small" (replaympi prints `mess<=1024`).
pub const DEFAULT_SMALL_MESSAGE: u64 = 1024;

/// Time categories of communication.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CommTimes {
    /// Waiting for a partner (s).
    pub wait: f64,
    /// Software latency (s).
    pub latency: f64,
    /// Small-message transfer (s).
    pub small: f64,
    /// Big-message transfer (s).
    pub big: f64,
}

impl CommTimes {
    /// wait + latency + small + big.
    pub fn total(&self) -> f64 {
        self.wait + self.latency + self.small + self.big
    }
}

/// Per-rank outcome.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RankResult {
    /// Rank.
    pub rank: u32,
    /// Time the rank finished (s).
    pub total_s: f64,
    /// Computation (s).
    pub computation_s: f64,
    /// Communication breakdown.
    pub comm: CommTimes,
    /// Time neither computing nor communicating: a blocking rendezvous send waiting for
    /// its receive to be posted (Dimemas 5.5 counts it in neither column), so
    /// total = computation + communication + idle.
    pub idle_s: f64,
    /// Bytes received.
    pub bytes_received: u64,
    /// Bytes buffered (Bandela's MPT buffering rule; 0 for Dimemas).
    pub bytes_buffered: u64,
    /// Bytes sent.
    pub bytes_sent: u64,
    /// Point-to-point messages sent.
    pub messages_sent: u64,
    /// Collectives executed.
    pub collectives: u64,
    /// Per-routine communication times.
    pub functions: BTreeMap<String, CommTimes>,
}

impl RankResult {
    /// communication = wait + latency + small + big.
    pub fn communication_s(&self) -> f64 {
        self.comm.total()
    }
}

/// One adapter's statistics (Bandela host type 2).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AdapterStats {
    /// Host.
    pub host: u32,
    /// Adapter index on the host.
    pub adapter: u32,
    /// Smallest request (bytes), if any.
    pub min_request: Option<f64>,
    /// Mean request (bytes), if any.
    pub avg_request: Option<f64>,
    /// Largest request (bytes), if any.
    pub max_request: Option<f64>,
    /// Fraction of the run the adapter was busy.
    pub busy_fraction: f64,
    /// Bytes moved / busy time (MB/s, MB = 10^6 as replaympi prints).
    pub aggregate_bw_mb_s: f64,
    /// Mean number of concurrent transfers while busy.
    pub avg_concurrent: f64,
}

/// One timeline interval (for the Chrome-trace / Perfetto export).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimelineEvent {
    /// Rank.
    pub rank: u32,
    /// State name ("compute", "wait", "latency", "transfer", routine names ...).
    pub name: String,
    /// Start (s).
    pub start_s: f64,
    /// End (s).
    pub end_s: f64,
}

/// The outcome of one replay.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReplayResult {
    /// `dimemas` or `bandela`.
    pub model: String,
    /// Predicted execution time (s): the latest rank end.
    pub predicted_time_s: f64,
    /// Records replayed.
    pub records: u64,
    /// Per rank.
    pub ranks: Vec<RankResult>,
    /// (receiver, sender) -> (messages, bytes).
    #[serde(serialize_with = "transfers_as_list")]
    pub transfers: BTreeMap<(u32, u32), (u64, u64)>,
    /// Adapter statistics (host type 2 only).
    pub adapters: Vec<AdapterStats>,
    /// Timeline, when requested.
    pub timeline: Vec<TimelineEvent>,
    /// The effective parameters, as JSON.
    pub params: serde_json::Value,
}

/// JSON objects need string keys: the matrix is written as
/// `[[receiver, sender, messages, bytes], ...]`.
fn transfers_as_list<S: serde::Serializer>(
    m: &BTreeMap<(u32, u32), (u64, u64)>,
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    let mut seq = s.serialize_seq(Some(m.len()))?;
    for (&(r, snd), &(n, b)) in m {
        seq.serialize_element(&(r, snd, n, b))?;
    }
    seq.end()
}
