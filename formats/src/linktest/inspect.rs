//! `benchlake inspect FILE`: what a SION file holds — container metadata of each
//! physical file, the LinkTest header (when the payload is LinkTest) and each
//! rank's host, location and size — as a serde struct and as text.
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::{Flags, decode};
use crate::error::Result;
use crate::sion::{ByteOrder, SionSet};

/// Container metadata of one physical file.
#[derive(Debug, Clone, Serialize)]
pub struct ContainerFile {
    /// Path.
    pub path: String,
    /// Bytes.
    pub file_len: u64,
    /// SIONlib version that wrote it, e.g. "1.7p6".
    pub sion_version: String,
    /// File format version.
    pub format_version: i32,
    /// Metadata byte order.
    pub byte_order: ByteOrder,
    /// User data declared big-endian.
    pub user_data_big_endian: bool,
    /// File-system block size.
    pub fsblksize: u64,
    /// Tasks in this file.
    pub ntasks: usize,
    /// Files in the set.
    pub nfiles: u32,
    /// This file's number.
    pub filenumber: i32,
    /// Key-value mode (50 = none).
    pub keyval_mode: i64,
    /// Recorded file name prefix.
    pub prefix: String,
    /// Offset of the first chunk.
    pub start_of_data: u64,
    /// Distance between a task's blocks.
    pub globalskip: u64,
    /// Most blocks of any task.
    pub maxchunks: u64,
    /// Offset of META2.
    pub start_of_varheader: u64,
    /// Stored chunk sizes.
    pub chunksizes: Vec<u64>,
    /// Entries of the rank mapping (file 0 of a multi-file set).
    pub mapping_size: usize,
}

/// The LinkTest header and summary.
#[derive(Debug, Clone, Serialize)]
pub struct PayloadSummary {
    /// "V1" or "V2".
    pub format: super::PayloadFormat,
    /// LinkTest version string.
    pub linktest_version: String,
    /// Git hash (2.x).
    pub git_hash: Option<String>,
    /// Mode.
    pub mode: String,
    /// Ranks.
    pub num_tasks: usize,
    /// Messages per measurement.
    pub num_messages: u64,
    /// Bytes per message.
    pub message_size: u64,
    /// Warm-up messages.
    pub num_warmup_messages: Option<u64>,
    /// Serial retests.
    pub num_serial_retests: u64,
    /// Buffers.
    pub num_multi_buffers: Option<u64>,
    /// Buffer seed.
    pub buffer_seed: Option<u64>,
    /// Randomized-task iterations.
    pub num_randomized_tasks: Option<u64>,
    /// Task seed.
    pub task_seed: Option<u64>,
    /// Allocator code.
    pub memory_allocator: Option<u8>,
    /// Flags.
    pub flags: Flags,
    /// Permutations stored.
    pub permutations: usize,
    /// Start time of the first permutation, as stored.
    pub start_time: Option<String>,
    /// End time of the last permutation, as stored.
    pub end_time: Option<String>,
    /// Minimum pair time (s).
    pub min_time_s: f64,
    /// Average pair time (s).
    pub avg_time_s: f64,
    /// Maximum pair time (s).
    pub max_time_s: f64,
    /// All-to-all (min, avg, max).
    pub a2a_time_s: Option<(f64, f64, f64)>,
    /// Slow links recorded (all permutations).
    pub slow_links: usize,
}

/// One rank.
#[derive(Debug, Clone, Serialize)]
pub struct RankSummary {
    /// Global rank.
    pub rank: usize,
    /// Host (LinkTest payload only).
    pub hostname: Option<String>,
    /// Core id (2.x).
    pub core_id: Option<i32>,
    /// Physical file index.
    pub file: usize,
    /// Task index in that file.
    pub local_task: usize,
    /// Blocks written.
    pub blocks: usize,
    /// Payload bytes.
    pub bytes: u64,
}

/// Everything `inspect` reports.
#[derive(Debug, Clone, Serialize)]
pub struct Inspection {
    /// File 0 of the set.
    pub path: String,
    /// Tasks in the set.
    pub ntasks: usize,
    /// Physical files.
    pub files: Vec<ContainerFile>,
    /// LinkTest header and summary, when the payload decodes as LinkTest.
    pub linktest: Option<PayloadSummary>,
    /// Why the payload is not LinkTest (or failed to decode).
    pub payload_error: Option<String>,
    /// Per-rank information.
    pub ranks: Vec<RankSummary>,
}

/// Inspects the SION set whose file 0 is `path`. Container errors are errors;
/// a payload that is not LinkTest is reported in `payload_error`.
pub fn inspect_file(path: &Path) -> Result<Inspection> {
    let set = SionSet::open(path)?;
    Ok(inspect_set(&set))
}

/// Inspects an opened set.
pub fn inspect_set(set: &SionSet) -> Inspection {
    let files = set
        .files()
        .iter()
        .map(|f| {
            let h = &f.header;
            ContainerFile {
                path: f.path.display().to_string(),
                file_len: h.file_len,
                sion_version: format!(
                    "{}.{}p{}",
                    h.sion_version_major, h.sion_version_minor, h.sion_patch_level
                ),
                format_version: h.format_version,
                byte_order: h.byte_order,
                user_data_big_endian: h.user_data_big_endian,
                fsblksize: h.fsblksize,
                ntasks: h.ntasks,
                nfiles: h.nfiles,
                filenumber: h.filenumber,
                keyval_mode: h.keyval_mode,
                prefix: h.prefix.clone(),
                start_of_data: h.start_of_data,
                globalskip: h.globalskip,
                maxchunks: h.maxchunks,
                start_of_varheader: h.start_of_varheader,
                chunksizes: h.chunksizes.clone(),
                mapping_size: h.mapping.len(),
            }
        })
        .collect();
    let (run, payload_error) = match decode(set) {
        Ok(r) => (Some(r), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let ranks = set
        .tasks()
        .map(|t| {
            let (file, local_task) = set.location(t.rank).unwrap_or((0, 0));
            let info = run.as_ref().and_then(|r| r.ranks.get(t.rank));
            RankSummary {
                rank: t.rank,
                hostname: info.map(|i| i.hostname.clone()),
                core_id: info.and_then(|i| i.core_id),
                file,
                local_task,
                blocks: t.blocks.len(),
                bytes: t.len(),
            }
        })
        .collect();
    let linktest = run.map(|r| {
        let (min, avg, max) = r.summary();
        PayloadSummary {
            format: r.format,
            linktest_version: r.version_string(),
            git_hash: r.git_hash.clone(),
            mode: r.mode.clone(),
            num_tasks: r.num_tasks,
            num_messages: r.num_messages,
            message_size: r.message_size,
            num_warmup_messages: r.num_warmup_messages,
            num_serial_retests: r.num_serial_retests,
            num_multi_buffers: r.num_multi_buffers,
            buffer_seed: r.buffer_seed,
            num_randomized_tasks: r.num_randomized_tasks,
            task_seed: r.task_seed,
            memory_allocator: r.memory_allocator,
            flags: r.flags,
            permutations: r.permutations.len(),
            start_time: r.permutations.first().and_then(|p| p.start_time.clone()),
            end_time: r.permutations.last().and_then(|p| p.end_time.clone()),
            min_time_s: min,
            avg_time_s: avg,
            max_time_s: max,
            a2a_time_s: r.a2a_summary(),
            slow_links: r.permutations.iter().map(|p| p.slow_links.len()).sum(),
        }
    });
    Inspection {
        path: set.path().display().to_string(),
        ntasks: set.ntasks(),
        files,
        linktest,
        payload_error,
        ranks,
    }
}

impl Inspection {
    /// Human-readable rendering (what `benchlake inspect` prints without `--json`).
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{}: SION file set, {} tasks in {} file(s)",
            self.path,
            self.ntasks,
            self.files.len()
        );
        for f in &self.files {
            let _ = writeln!(
                s,
                "  file {} {}: {} bytes, SIONlib {}, format {}, {:?}-endian metadata{}, fsblksize {}, {} tasks, maxchunks {}, data at {}, globalskip {}, META2 at {}{}",
                f.filenumber,
                f.path,
                f.file_len,
                f.sion_version,
                f.format_version,
                f.byte_order,
                if f.user_data_big_endian {
                    " (user data big-endian)"
                } else {
                    ""
                },
                f.fsblksize,
                f.ntasks,
                f.maxchunks,
                f.start_of_data,
                f.globalskip,
                f.start_of_varheader,
                if f.mapping_size > 0 {
                    format!(", mapping of {} ranks", f.mapping_size)
                } else {
                    String::new()
                },
            );
        }
        match (&self.linktest, &self.payload_error) {
            (Some(l), _) => {
                let _ = writeln!(
                    s,
                    "LinkTest {} ({:?} layout), mode {}, {} tasks, {} messages of {} bytes, warm-up {}, serial retests {}, permutations {}",
                    l.linktest_version,
                    l.format,
                    l.mode,
                    l.num_tasks,
                    l.num_messages,
                    l.message_size,
                    opt(l.num_warmup_messages),
                    l.num_serial_retests,
                    l.permutations
                );
                if let Some(g) = &l.git_hash {
                    let _ = writeln!(s, "  git hash {g}");
                }
                let fl = &l.flags;
                let on: Vec<&str> = [
                    (fl.all_to_all, "all-to-all"),
                    (fl.bidirectional, "bidirectional"),
                    (fl.unidirectional, "unidirectional"),
                    (fl.bisection, "bisection"),
                    (fl.randomize_steps, "randomized steps"),
                    (fl.serial, "serial"),
                    (fl.parallel_sion, "parallel SION"),
                    (fl.gpu_memory, "GPU memory"),
                    (fl.multi_buffer, "multi-buffer"),
                    (fl.randomize_buffers, "randomized buffers"),
                    (fl.check_buffers, "checked buffers"),
                    (fl.mix_ranks, "mixed ranks"),
                ]
                .into_iter()
                .filter_map(|(b, n)| b.then_some(n))
                .collect();
                let _ = writeln!(
                    s,
                    "  options: {}",
                    if on.is_empty() {
                        "none".to_string()
                    } else {
                        on.join(", ")
                    }
                );
                if l.start_time.is_some() || l.end_time.is_some() {
                    let _ = writeln!(
                        s,
                        "  start {} end {}",
                        l.start_time.as_deref().unwrap_or("-"),
                        l.end_time.as_deref().unwrap_or("-")
                    );
                }
                let _ = writeln!(
                    s,
                    "  time per message: min {:.3} us, avg {:.3} us, max {:.3} us; {} slow link(s) recorded",
                    l.min_time_s * 1e6,
                    l.avg_time_s * 1e6,
                    l.max_time_s * 1e6,
                    l.slow_links
                );
                if let Some((a, b, c)) = l.a2a_time_s {
                    let _ = writeln!(
                        s,
                        "  all-to-all: min {:.3} us, avg {:.3} us, max {:.3} us",
                        a * 1e6,
                        b * 1e6,
                        c * 1e6
                    );
                }
            }
            (None, Some(e)) => {
                let _ = writeln!(s, "payload is not a LinkTest result: {e}");
            }
            (None, None) => {}
        }
        let _ = writeln!(
            s,
            "{:>6}  {:<24} {:>6} {:>5} {:>6} {:>7} {:>10}",
            "rank", "host", "core", "file", "task", "blocks", "bytes"
        );
        for r in &self.ranks {
            let _ = writeln!(
                s,
                "{:>6}  {:<24} {:>6} {:>5} {:>6} {:>7} {:>10}",
                r.rank,
                r.hostname.as_deref().unwrap_or("-"),
                r.core_id
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "-".into()),
                r.file,
                r.local_task,
                r.blocks,
                r.bytes
            );
        }
        s
    }
}

fn opt(v: Option<u64>) -> String {
    v.map(|x| x.to_string()).unwrap_or_else(|| "n/a".into())
}
