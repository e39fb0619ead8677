//! `hostinfo`: the node facts recorded by the built-in `hostinfo` benchmark
//! (`benchlake probe host`), a small JSON document per node, and its reader into
//! the `node_facts` table. Administrators use it to spot nodes whose kernel,
//! CPU model or memory differ from their peers.
use std::sync::Arc;

use arrow::array::{
    ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use benchlake_core::catalog;
use benchlake_core::lake::TableOutput;
use serde::{Deserialize, Serialize};

use crate::error::{FormatError, Position, Result};
use crate::ingest::{IngestContext, InputFile};

/// Largest hostinfo document accepted.
const MAX_BYTES: u64 = 1 << 20;

/// One node's facts. Unknown fields are refused: a key damaged into another
/// name must not land as a missing optional field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostFacts {
    /// Format version (1).
    pub version: u32,
    pub hostname: String,
    /// `uname -r`.
    pub kernel_release: String,
    /// `uname -v`.
    pub kernel_version: String,
    pub cpu_model: String,
    pub cores: i64,
    pub memory_bytes: i64,
    pub load_1m: f64,
    pub uptime_s: f64,
    /// When collected, ms since the epoch.
    pub collected_at_ms: i64,
    /// The node (`benchlake_core::node`: the Slurm node name in a Slurm
    /// task, else the agent's node, else the host name); absent in documents
    /// written before every collection named it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Collects this node's facts from /proc.
pub fn collect() -> HostFacts {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    let mem_kb: i64 = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0);
    let first = |p: &str| -> f64 {
        read_trim(p)
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    HostFacts {
        version: 1,
        hostname: benchlake_core::node::hostname(),
        kernel_release: read_trim("/proc/sys/kernel/osrelease"),
        kernel_version: read_trim("/proc/sys/kernel/version"),
        cpu_model,
        cores: std::thread::available_parallelism()
            .map(|n| n.get() as i64)
            .unwrap_or(1),
        memory_bytes: mem_kb.saturating_mul(1024),
        load_1m: first("/proc/loadavg"),
        uptime_s: first("/proc/uptime"),
        collected_at_ms: chrono::Utc::now().timestamp_millis(),
        node: Some(benchlake_core::node::name()),
    }
}

/// Most hardware threads a node is taken to have (no machine has a million).
pub const MAX_CORES: i64 = 1 << 20;
/// Most memory a node is taken to have: 1 PiB (the largest shared-memory
/// machines hold tens of TiB).
pub const MAX_MEMORY_BYTES: i64 = 1 << 50;
/// Highest load average: Linux's PID_MAX_LIMIT, the most tasks a run queue
/// can hold.
pub const MAX_LOAD: f64 = 4_194_304.0;
/// Earliest and latest collection times accepted (2000-01-01 and
/// 2200-01-01 UTC, ms since the epoch).
pub const COLLECTED_RANGE_MS: (i64, i64) = (946_684_800_000, 7_258_118_400_000);

/// Parses one document; errors carry line and column (for the syntax) or the
/// byte offset of the value out of range: every number must be one a node can
/// report (docs/tables.md, `node_facts`).
pub fn parse(file: &std::path::Path, text: &str) -> Result<HostFacts> {
    let f: HostFacts = serde_json::from_str(text).map_err(|e| {
        FormatError::malformed(
            file,
            "hostinfo",
            Position::LineCol(e.line() as u64, e.column() as u64),
            e.to_string(),
        )
    })?;
    let bad = |field: &str, msg: String| {
        FormatError::malformed(
            file,
            field,
            Position::Offset(crate::io::text::json_offset(text.as_bytes(), field)),
            msg,
        )
    };
    if f.version != 1 {
        return Err(bad("version", format!("unsupported version {}", f.version)));
    }
    if !(1..=MAX_CORES).contains(&f.cores) {
        return Err(bad(
            "cores",
            format!("{}: not within 1..={MAX_CORES}", f.cores),
        ));
    }
    // MemTotal is in KiB: the bytes are a multiple of 1,024.
    if !(1024..=MAX_MEMORY_BYTES).contains(&f.memory_bytes) || f.memory_bytes % 1024 != 0 {
        return Err(bad(
            "memory_bytes",
            format!(
                "{}: not a multiple of 1024 within 1 KiB..={MAX_MEMORY_BYTES}",
                f.memory_bytes
            ),
        ));
    }
    if !(f.load_1m.is_finite() && (0.0..=MAX_LOAD).contains(&f.load_1m)) {
        return Err(bad(
            "load_1m",
            format!("{}: not within 0..={MAX_LOAD}", f.load_1m),
        ));
    }
    let (lo, hi) = COLLECTED_RANGE_MS;
    if !(lo..=hi).contains(&f.collected_at_ms) {
        return Err(bad(
            "collected_at_ms",
            format!("{}: not a time between 2000 and 2200", f.collected_at_ms),
        ));
    }
    // A node cannot have been up since before the epoch.
    if !(f.uptime_s.is_finite()
        && f.uptime_s >= 0.0
        && f.uptime_s * 1000.0 <= f.collected_at_ms as f64)
    {
        return Err(bad(
            "uptime_s",
            format!(
                "{}: negative, or longer than the time since 1970 when collected",
                f.uptime_s
            ),
        ));
    }
    // Host and node names: RFC 1123 characters; the kernel release: what
    // `uname -r` prints; the rest printable text.
    let name_ok = |s: &str| {
        s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
    };
    let checks: [(&str, &str, bool); 5] = [
        ("hostname", &f.hostname, name_ok(&f.hostname)),
        (
            "node",
            f.node.as_deref().unwrap_or(""),
            name_ok(f.node.as_deref().unwrap_or("")),
        ),
        (
            "kernel_release",
            &f.kernel_release,
            f.kernel_release
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '+' | '~')),
        ),
        (
            "kernel_version",
            &f.kernel_version,
            !f.kernel_version.chars().any(char::is_control),
        ),
        (
            "cpu_model",
            &f.cpu_model,
            !f.cpu_model.chars().any(char::is_control),
        ),
    ];
    for (field, value, ok) in checks {
        if !ok {
            return Err(bad(
                field,
                format!("'{value}' holds characters it never has"),
            ));
        }
    }
    Ok(f)
}

/// Ingest kind `hostinfo`: every file → one `node_facts` row.
pub fn ingest(inputs: &[InputFile], ctx: &IngestContext) -> Result<Vec<TableOutput>> {
    let mut rows = Vec::with_capacity(inputs.len());
    for i in inputs {
        let len = std::fs::metadata(&i.path)
            .map_err(|e| FormatError::io(&i.path, e))?
            .len();
        if len > MAX_BYTES {
            return Err(FormatError::malformed(
                &i.path,
                "hostinfo",
                Position::Offset(MAX_BYTES),
                "document larger than 1 MiB",
            ));
        }
        let bytes = std::fs::read(&i.path).map_err(|e| FormatError::io(&i.path, e))?;
        // A binary file (a SION container, a trace) is a foreign format, not an
        // I/O failure to retry.
        let text = std::str::from_utf8(&bytes).map_err(|e| {
            FormatError::malformed(
                &i.path,
                "hostinfo",
                Position::Offset(e.valid_up_to() as u64),
                "not UTF-8 text: not a node facts JSON document",
            )
        })?;
        rows.push((
            i.source.clone(),
            parse(&i.path, text).map_err(|e| e.with_offset(&bytes))?,
        ));
    }
    let n = rows.len();
    let s = |f: &dyn Fn(&HostFacts) -> &str| -> ArrayRef {
        Arc::new(StringArray::from(
            rows.iter().map(|r| f(&r.1)).collect::<Vec<_>>(),
        ))
    };
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(vec![ctx.run_id.as_str(); n])),
        Arc::new(StringArray::from(
            rows.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(),
        )),
        s(&|h| &h.hostname),
        s(&|h| &h.kernel_release),
        s(&|h| &h.kernel_version),
        s(&|h| &h.cpu_model),
        Arc::new(Int64Array::from(
            rows.iter().map(|r| r.1.cores).collect::<Vec<_>>(),
        )),
        Arc::new(Int64Array::from(
            rows.iter().map(|r| r.1.memory_bytes).collect::<Vec<_>>(),
        )),
        Arc::new(Float64Array::from(
            rows.iter().map(|r| r.1.load_1m).collect::<Vec<_>>(),
        )),
        Arc::new(Float64Array::from(
            rows.iter().map(|r| r.1.uptime_s).collect::<Vec<_>>(),
        )),
        Arc::new(
            TimestampMicrosecondArray::from(
                rows.iter()
                    .map(|r| r.1.collected_at_ms.saturating_mul(1000))
                    .collect::<Vec<_>>(),
            )
            .with_timezone("UTC"),
        ),
        Arc::new(StringArray::from(
            rows.iter().map(|r| r.1.node.as_deref()).collect::<Vec<_>>(),
        )),
    ];
    let batch = RecordBatch::try_new(catalog::schema("node_facts")?, cols)?;
    Ok(vec![TableOutput::new("node_facts", vec![batch])])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collect_round_trips_through_ingest() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("host.json");
        let f = collect();
        assert!(f.cores >= 1 && f.memory_bytes > 0 && !f.kernel_release.is_empty());
        std::fs::write(&p, serde_json::to_string(&f).unwrap()).unwrap();
        let out = ingest(
            &[InputFile::from_path(&p)],
            &IngestContext {
                run_id: "R".into(),
                date: "2026-11-22".into(),
            },
        )
        .unwrap();
        assert_eq!(out[0].table, "node_facts");
        let b = &out[0].batches[0];
        assert_eq!(b.num_rows(), 1);
        let host = b.column(2).as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(host.value(0), f.hostname);
    }

    #[test]
    fn bad_documents_name_the_position() {
        let p = std::path::Path::new("h.json");
        let e = parse(p, "{\n  \"version\": 1,\n  \"hostname\": 5\n}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("h.json") && e.contains("line 3"), "{e}");
        let e = parse(
            p,
            &serde_json::to_string(&HostFacts {
                version: 9,
                ..collect()
            })
            .unwrap(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("version"), "{e}");
    }
}
