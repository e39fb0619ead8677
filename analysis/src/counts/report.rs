//! Drop-in text reports in the Go tools' file formats, so users' scripts keep
//! working: `patterns-job<J>-rank<L>.md`, `patterns-summary-job<J>-rank<L>.md`,
//! `stats-job<J>-rank<L>.md` (srcountsanalyzer / profile step 1), and the heat
//! maps of profile step 3 (`alltoallv_heat-map.rank<L>-{send,recv}.md`,
//! `alltoallv_hosts-heat-map.rank<L>-{send,recv}.md`, `heat-map-{send,recv}.md`).
//!
//! Lines the Go tools derive from maps come out in an unstable order there; here
//! they are sorted by (number of calls, key), which is one of the orders the Go
//! tools can produce. `heat-map-{send,recv}.md` is written once, with the final
//! cumulative figures (the Go tool appends partial sums once per communicator).
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::Path;

use benchlake_formats::counts::ranklist;

use super::summary::Direction;
use super::{Analysis, Class, CountsError, LeadAnalysis, Pattern};

/// `(key, value)` pairs sorted by value, then key.
fn by_value(m: &BTreeMap<u64, u64>) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = m.iter().map(|(k, v)| (*k, *v)).collect();
    v.sort_by_key(|(k, v)| (*v, *k));
    v
}

fn pattern_block(s: &mut String, num: u64, total: u64, p: &Pattern) {
    let _ = write!(
        s,
        "## Pattern #{num} ({}/{total} alltoallv calls)\n\nAlltoallv calls: {}\n\n",
        p.calls.len(),
        ranklist::format(&p.calls.0, ",")
    );
    for (peers, ranks) in by_value(&p.send) {
        let _ = write!(s, "{ranks} ranks sent to {peers} other ranks\n\n");
    }
    for (peers, ranks) in by_value(&p.recv) {
        let _ = write!(s, "{ranks} ranks recv'd from {peers} other ranks\n\n");
    }
    s.push('\n');
}

/// `patterns-job<J>-rank<L>.md`.
pub fn patterns(l: &LeadAnalysis) -> String {
    let mut s = String::from("# Patterns\n");
    for p in &l.patterns {
        pattern_block(&mut s, p.id, l.stats.num_calls, p);
    }
    s
}

/// `patterns-summary-job<J>-rank<L>.md`.
pub fn summary(l: &LeadAnalysis) -> String {
    if l.classes.values().all(|v| v.is_empty()) {
        return "Nothing special detected; no summary".to_string();
    }
    let mut s = String::new();
    for (class, title) in [
        (Class::OneToN, "# 1 to N patterns\n\n"),
        (Class::NToOne, "\n# N to 1 patterns\n\n"),
        (Class::NToN, "\n# N to n patterns\n\n"),
    ] {
        let Some(ids) = l.classes.get(&class).filter(|v| !v.is_empty()) else {
            continue;
        };
        s.push_str(title);
        for (k, id) in ids.iter().enumerate() {
            let Some(p) = l.patterns.get(*id as usize) else {
                continue;
            };
            // The reference numbers the 1→N blocks 0, 1, ... and every N→1 and
            // N→N block #0 (it never increments that counter).
            let num = if class == Class::OneToN { k as u64 } else { 0 };
            pattern_block(&mut s, num, l.stats.num_calls, p);
        }
    }
    s
}

/// `stats-job<J>-rank<L>.md`.
pub fn stats(l: &LeadAnalysis, threshold: u64) -> String {
    let st = &l.stats;
    let n = st.num_calls;
    let mut s = format!("Total number of alltoallv calls: {n}\n\n# Datatypes\n\n");
    for (d, k) in &st.send_datatypes {
        let _ = writeln!(
            s,
            "{k}/{n} calls use a datatype of size {d} while sending data"
        );
    }
    for (d, k) in &st.recv_datatypes {
        let _ = writeln!(
            s,
            "{k}/{n} calls use a datatype of size {d} while receiving data"
        );
    }
    s.push_str("\n# Communicator size(s)\n\n");
    for (c, k) in by_value(&st.comm_sizes) {
        let _ = writeln!(s, "{k}/{n} calls use a communicator size of {c}");
    }
    let total = st.small.saturating_add(st.large);
    let _ = write!(
        s,
        "\n# Message sizes\n\n{}/{total} of all messages are large (threshold = {threshold})\n\
         {}/{total} of all messages are small (threshold = {threshold})\n\
         {}/{total} of all messages are small, but not 0-size (threshold = {threshold})\n",
        st.large, st.small, st.small_nonzero
    );
    s.push_str("\n# Sparsity\n\n");
    for (z, k) in by_value(&st.send_sparsity) {
        let _ = writeln!(
            s,
            "{k}/{n} of all calls have {z} send counts equals to zero"
        );
    }
    for (z, k) in by_value(&st.recv_sparsity) {
        let _ = writeln!(
            s,
            "{k}/{n} of all calls have {z} recv counts equals to zero"
        );
    }
    s.push_str("\n# Min/max\n");
    let sections: [(&BTreeMap<u64, u64>, &str); 6] = [
        (&st.send_min, "send count min of {}"),
        (&st.recv_min, "recv count min of {}"),
        (
            &st.send_min_nonzero,
            "send count min of {} (excluding zero)",
        ),
        (
            &st.recv_min_nonzero,
            "recv count min of {} (excluding zero)",
        ),
        (&st.send_max, "send count max of {}"),
        (&st.recv_max, "recv count max of {}"),
    ];
    for (m, what) in sections {
        for (v, k) in by_value(m) {
            let _ = writeln!(
                s,
                "{k}/{n} calls have a {}",
                what.replace("{}", &v.to_string())
            );
        }
        s.push('\n');
    }
    s
}

/// Most calls expanded one by one (per-call heat maps, pattern call lists);
/// call lists are ranges everywhere else, so `0-999999` costs nothing.
pub const MAX_EXPANDED_CALLS: u64 = 1 << 24;

/// Bytes of rendered mapping bodies [`write_call_heatmap`] keeps for reuse;
/// past it a body is rendered again for each of its calls.
const BODY_CACHE_BYTES: usize = 64 << 20;

/// Per call, world rank → bytes, in call order (`alltoallv_heat-map.rank<L>-*.md`),
/// streamed to `out`. Every call of one count mapping prints the same lines,
/// so each mapping's lines are rendered once and copied for each of its calls:
/// the file is mostly such copies (117 MB for 5,000 calls of 1,024 ranks).
pub fn write_call_heatmap(
    l: &LeadAnalysis,
    d: Direction,
    out: &mut impl std::io::Write,
) -> Result<(), HeatmapError> {
    let total: u64 = l
        .blocks
        .iter()
        .map(|b| b.calls.len())
        .fold(0, u64::saturating_add);
    if total > MAX_EXPANDED_CALLS {
        return Err(HeatmapError::TooManyCalls {
            lead: l.lead,
            calls: total,
        });
    }
    // (call, block, mapping) for every call, sorted by call.
    let mut calls: Vec<(u64, usize, usize)> = Vec::new();
    for (bi, b) in l.blocks.iter().enumerate() {
        for (mi, m) in b.mappings.iter().enumerate() {
            for &(a, z) in &m.calls.0 {
                calls.extend((a..=z).map(|c| (c, bi, mi)));
            }
        }
    }
    calls.sort_unstable();
    out.write_all(b"FORMAT_VERSION: 9\n\n")?;
    let mut bodies: HashMap<(usize, usize), Vec<u8>> = HashMap::new();
    let mut cached = 0usize;
    let mut scratch = Vec::new();
    let mut line: Vec<(u64, u64)> = Vec::new();
    let mut head = String::new();
    for (c, bi, mi) in calls {
        let (Some(b), Some(m)) = (
            l.blocks.get(bi),
            l.blocks.get(bi).and_then(|b| b.mappings.get(mi)),
        ) else {
            continue;
        };
        head.clear();
        let _ = writeln!(head, "# Call {c}:");
        out.write_all(head.as_bytes())?;
        if let Some(body) = bodies.get(&(bi, mi)) {
            out.write_all(body)?;
            continue;
        }
        line.clear();
        for (i, bytes) in b.side(d).rank_bytes.iter().enumerate() {
            let w = match &m.world_ranks {
                Some(w) => w.get(i).copied().unwrap_or(i as u64),
                None => i as u64,
            };
            line.push((w, *bytes));
        }
        line.sort_unstable();
        scratch.clear();
        for (w, bytes) in &line {
            // Plain integers: itoa-free formatting through std is fast enough
            // once per mapping.
            let _ =
                std::io::Write::write_fmt(&mut scratch, format_args!("Rank {w}: {bytes} bytes\n"));
        }
        out.write_all(&scratch)?;
        if cached + scratch.len() <= BODY_CACHE_BYTES {
            cached += scratch.len();
            bodies.insert((bi, mi), std::mem::take(&mut scratch));
        }
    }
    out.write_all(b"\n")?;
    Ok(())
}

/// Why a per-call heat map could not be written.
#[derive(Debug, thiserror::Error)]
pub enum HeatmapError {
    /// Expanding the calls one by one would be too much.
    #[error(
        "lead rank {lead}: {calls} calls is too many for a per-call heat map (limit {MAX_EXPANDED_CALLS}); disable Options::call_heatmaps"
    )]
    TooManyCalls {
        /// The lead rank.
        lead: u64,
        /// Its number of calls.
        calls: u64,
    },
    /// Writing failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Host → bytes of one lead rank and direction.
pub fn host_bytes(
    l: &LeadAnalysis,
    d: Direction,
    hosts: &BTreeMap<u64, String>,
) -> BTreeMap<String, u64> {
    let mut m: BTreeMap<String, u64> = BTreeMap::new();
    if let Some(rb) = l.rank_bytes.get(&d) {
        for (w, b) in rb {
            if let Some(h) = hosts.get(w) {
                let e = m.entry(h.clone()).or_default();
                *e = e.saturating_add(*b);
            }
        }
    }
    m
}

/// `alltoallv_hosts-heat-map.rank<L>-*.md`.
pub fn host_heatmap(l: &LeadAnalysis, d: Direction, hosts: &BTreeMap<u64, String>) -> String {
    let mut s = String::from("FORMAT_VERSION: 9\n\n");
    for (h, b) in host_bytes(l, d, hosts) {
        let _ = writeln!(s, "Host {h}: {b} bytes");
    }
    s
}

/// `heat-map-*.md`: world rank → bytes over every lead rank.
pub fn global_heatmap(a: &Analysis, d: Direction) -> String {
    let mut m: BTreeMap<u64, u64> = BTreeMap::new();
    for l in &a.leads {
        if let Some(rb) = l.rank_bytes.get(&d) {
            for (w, b) in rb {
                let e = m.entry(*w).or_default();
                *e = e.saturating_add(*b);
            }
        }
    }
    let mut s = String::from("FORMAT_VERSION: 9\n\n");
    for (w, b) in m {
        let _ = writeln!(s, "Rank {w}: {b} bytes");
    }
    s
}

fn write(dir: &Path, name: &str, text: &str) -> Result<(), CountsError> {
    let p = dir.join(name);
    std::fs::write(&p, text).map_err(|e| CountsError::Io { path: p, source: e })
}

/// Writes every report of `a` into `dir` (created if needed).
pub fn write_all(a: &Analysis, dir: &Path) -> Result<(), CountsError> {
    std::fs::create_dir_all(dir).map_err(|e| CountsError::Io {
        path: dir.to_path_buf(),
        source: e,
    })?;
    for l in &a.leads {
        let (j, r) = (l.job, l.lead);
        write(dir, &format!("patterns-job{j}-rank{r}.md"), &patterns(l))?;
        write(
            dir,
            &format!("patterns-summary-job{j}-rank{r}.md"),
            &summary(l),
        )?;
        write(
            dir,
            &format!("stats-job{j}-rank{r}.md"),
            &stats(l, a.options.size_threshold),
        )?;
        for d in [Direction::Send, Direction::Recv] {
            let ds = d.as_str();
            if a.options.call_heatmaps {
                let p = dir.join(format!("alltoallv_heat-map.rank{r}-{ds}.md"));
                let io = |source| CountsError::Io {
                    path: p.clone(),
                    source,
                };
                let f = std::fs::File::create(&p).map_err(io)?;
                let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
                match write_call_heatmap(l, d, &mut w) {
                    Ok(()) => {}
                    Err(HeatmapError::Io(e)) => return Err(io(e)),
                    Err(e) => return Err(CountsError::Input(e.to_string())),
                }
                std::io::Write::flush(&mut w).map_err(io)?;
            }
            if !a.hosts.is_empty() {
                write(
                    dir,
                    &format!("alltoallv_hosts-heat-map.rank{r}-{ds}.md"),
                    &host_heatmap(l, d, &a.hosts),
                )?;
            }
        }
    }
    for d in [Direction::Send, Direction::Recv] {
        write(
            dir,
            &format!("heat-map-{}.md", d.as_str()),
            &global_heatmap(a, d),
        )?;
    }
    Ok(())
}
