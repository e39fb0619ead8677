//! Issue "Trust, second round", item 5: corrupt input is never accepted
//! silently. For every ingest kind, 520 damaged copies of an intact real (or
//! tool-written) input are made deterministically (fixed seed): cuts at random
//! offsets, bit flips, and numbers replaced by -1, 1e308, NaN and 2^31. Each
//! is ingested with the other files of the input intact, and must be either
//! refused with an error naming the file and a position (byte offset, or line
//! and column), or accepted with exactly the intact input's rows. The few
//! damages no reader can see (docs/testing.md, "Damaged inputs", lists them
//! per format, with why) are counted apart, by rule, not by list.
//!
//! `DAMAGE_CORPUS_OUT=DIR cargo test -p benchlake-formats --test damaged`
//! also writes every damaged file to `DIR/<kind>/`: seeds for the fuzz
//! targets (fuzz/README.md).
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use arrow::array::RecordBatch;
use benchlake_core::lake::TableOutput;
use benchlake_formats::{FormatError, IngestContext, InputFile, ingest};

/// Damaged files per kind (the campaign's figure).
const PER_KIND: usize = 520;
const SEED: u64 = 0x5eed_da3a_9e00_0005;

fn shared(rel: &str) -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data")).join(rel)
}

/// splitmix64: a fixed, dependency-free generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// One input: files (name, bytes), the first `damageable` of which are damaged.
struct Sample {
    kind: &'static str,
    files: Vec<(String, Vec<u8>)>,
    binary: bool,
}

fn read(rel: &str) -> (String, Vec<u8>) {
    let p = shared(rel);
    let name = p.file_name().unwrap().to_string_lossy().into_owned();
    (
        name,
        std::fs::read(&p).unwrap_or_else(|e| panic!("{rel}: {e}")),
    )
}

fn read_dir(rel: &str, pick: impl Fn(&str) -> bool) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(shared(rel))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| pick(n))
        .map(|n| read(&format!("{rel}/{n}")))
        .collect();
    v.sort();
    v
}

/// A node facts document as `benchlake probe host` writes it (pretty JSON).
fn hostinfo_doc(host: &str, node: Option<&str>, cores: i64) -> Vec<u8> {
    let node = node
        .map(|n| format!(",\n  \"node\": \"{n}\""))
        .unwrap_or_default();
    format!(
        "{{\n  \"version\": 1,\n  \"hostname\": \"{host}\",\n  \"kernel_release\": \"6.8.0-45-generic\",\n  \"kernel_version\": \"#45-Ubuntu SMP PREEMPT_DYNAMIC Fri Aug 30 12:02:04 UTC 2024\",\n  \"cpu_model\": \"AMD EPYC 7763 64-Core Processor\",\n  \"cores\": {cores},\n  \"memory_bytes\": 540866924544,\n  \"load_1m\": 0.37,\n  \"uptime_s\": 1234567.89,\n  \"collected_at_ms\": 1795467425931{node}\n}}"
    )
    .into_bytes()
}

/// Rank `t` of the halo trace `benchlake probe bandela` writes
/// (replay/src/synth.rs), 4 ranks, 5 iterations, an Allreduce at the end.
fn bandela_rank(t: u32, p: u32, iters: u32) -> Vec<u8> {
    use std::fmt::Write as _;
    let (l, r) = ((t + p - 1) % p, (t + 1) % p);
    let bur = 0.001 * (1.0 + 0.1 * f64::from(t % 7));
    let m = 65536;
    let mut s = format!(
        "# bandela-replay v1  rank={t} nranks={p}  (benchlake probe bandela)\nH {t} {p} 0\n"
    );
    let mut ord = 0u64;
    for i in 0..iters {
        let _ = write!(
            s,
            "C {bur:.9}\nK {} MPI_Irecv irecv {l} 1 1 {m} 1 0\nK {} MPI_Irecv irecv {r} 1 2 {m} 2 0\nK {} MPI_Isend isend {r} 1 1 {m} 3 0\nK {} MPI_Isend isend {l} 1 2 {m} 4 0\n",
            ord,
            ord + 1,
            ord + 2,
            ord + 3
        );
        ord += 4;
        for q in 1..=4 {
            let _ = writeln!(s, "K {ord} MPI_Waitall wait {q}");
        }
        ord += 1;
        if i + 1 == iters {
            let _ = writeln!(s, "K {ord} MPI_Allreduce barrier 0");
        }
    }
    let _ = writeln!(s, "C {:.9}", bur / 2.0);
    s.into_bytes()
}

fn samples() -> Vec<Sample> {
    let text = |kind, files| Sample {
        kind,
        files,
        binary: false,
    };
    let mut counts = read_dir("counts/a2av_cases_np4/counts", |_| true);
    counts.extend(read_dir("counts/a2av_cases_np4/exec_timings", |n| {
        n.starts_with("alltoallv_execution_times")
    }));
    vec![
        text("counts", counts),
        text(
            "hostinfo",
            vec![
                (
                    "host0.json".into(),
                    hostinfo_doc("jrc0001", Some("jrc0001"), 128),
                ),
                ("host1.json".into(), hostinfo_doc("jrc0002", None, 256)),
            ],
        ),
        text(
            "ior",
            vec![
                read("io/fpp_posix_np4/summary.json"),
                read("io/fpp_posix_np4/rank_details.csv"),
                {
                    let (_, b) = read("io/fpp_posix_np4/human.txt");
                    ("human.txt".into(), b)
                },
            ],
        ),
        text(
            "mdtest",
            vec![
                read("io/mdtest_files_dirs_np4/human.txt"),
                read("io/mdtest_files_dirs_np4/rank_details.csv"),
            ],
        ),
        text(
            "pio",
            vec![{
                let p = Path::new(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/tests/data/pio_np2_result.json"
                ));
                ("pio_np2_result.json".into(), std::fs::read(p).unwrap())
            }],
        ),
        text("dimemas", vec![read("replay/dimemas/traces/ring_np4.dim")]),
        text(
            "bandela",
            (0..4)
                .map(|t| (format!("bandela.{t}.txt"), bandela_rank(t, 4, 5)))
                .collect(),
        ),
        Sample {
            kind: "linktest",
            files: vec![read(
                "linktest/v1.2p1/np4_default/pingpong_results_bin.sion",
            )],
            binary: true,
        },
    ]
}

/// What was done to a file.
#[derive(Debug, Clone)]
enum Damage {
    /// Kept the first `len` bytes.
    Cut { len: usize },
    /// Flipped bit `bit` of byte `at`.
    Flip { at: usize, bit: u8 },
    /// Replaced the number at `at..end` (text) or the word at `at` (binary).
    Number {
        at: usize,
        end: usize,
        with: &'static str,
    },
}

const NUMBERS: [&str; 4] = ["-1", "1e308", "NaN", "2147483648"];

/// Byte ranges of the numbers of a text: `-?digits[.digits][e[+-]digits]`,
/// not part of a word (so `rank0`'s 0 and `v1`'s 1 are left alone).
fn numbers(b: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    while i < b.len() {
        let start = i;
        let mut j = i;
        if b[j] == b'-' && j + 1 < b.len() && b[j + 1].is_ascii_digit() {
            j += 1;
        }
        if b[j].is_ascii_digit() && (start == 0 || !word(b[start - 1])) {
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            if j + 1 < b.len() && b[j] == b'.' && b[j + 1].is_ascii_digit() {
                j += 1;
                while j < b.len() && b[j].is_ascii_digit() {
                    j += 1;
                }
            }
            if j < b.len() && (b[j] == b'e' || b[j] == b'E') {
                let mut k = j + 1;
                if k < b.len() && (b[k] == b'+' || b[k] == b'-') {
                    k += 1;
                }
                if k < b.len() && b[k].is_ascii_digit() {
                    while k < b.len() && b[k].is_ascii_digit() {
                        k += 1;
                    }
                    j = k;
                }
            }
            if j >= b.len() || !word(b[j]) {
                out.push((start, j));
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

fn apply(data: &[u8], d: &Damage, binary: bool) -> Vec<u8> {
    match *d {
        Damage::Cut { len } => data[..len].to_vec(),
        Damage::Flip { at, bit } => {
            let mut v = data.to_vec();
            v[at] ^= 1 << bit;
            v
        }
        Damage::Number { at, end, with } if binary => {
            let mut v = data.to_vec();
            let word: Vec<u8> = match with {
                "-1" => (-1i64).to_le_bytes().to_vec(),
                "1e308" => 1e308f64.to_le_bytes().to_vec(),
                "NaN" => f64::NAN.to_le_bytes().to_vec(),
                _ => (1u32 << 31).to_le_bytes().to_vec(),
            };
            let n = word.len().min(end - at);
            v[at..at + n].copy_from_slice(&word[..n]);
            v
        }
        Damage::Number { at, end, with } => {
            let mut v = data[..at].to_vec();
            v.extend_from_slice(with.as_bytes());
            v.extend_from_slice(&data[end..]);
            v
        }
    }
}

/// The damages of one sample: a quarter cuts, a quarter flips, half numbers.
fn damages(s: &Sample, rng: &mut Rng) -> Vec<(usize, Damage)> {
    let mut out = Vec::new();
    for i in 0..PER_KIND {
        let f = rng.below(s.files.len());
        let data = &s.files[f].1;
        let d = match i % 4 {
            0 => Damage::Cut {
                len: rng.below(data.len()),
            },
            1 => Damage::Flip {
                at: rng.below(data.len()),
                bit: (rng.next() % 8) as u8,
            },
            _ => {
                let with = NUMBERS[(i / 4 + i % 4) % 4];
                if s.binary {
                    let at = rng.below(data.len() / 4) * 4;
                    Damage::Number {
                        at,
                        end: (at + 8).min(data.len()),
                        with,
                    }
                } else {
                    let nums = numbers(data);
                    let (at, end) = nums[rng.below(nums.len())];
                    Damage::Number { at, end, with }
                }
            }
        };
        out.push((f, d));
    }
    out
}

/// Tables as (name, one batch) in a fixed order.
fn tables(out: Vec<TableOutput>) -> BTreeMap<String, RecordBatch> {
    out.into_iter()
        .map(|t| {
            let schema = t
                .batches
                .first()
                .map(|b| b.schema())
                .unwrap_or_else(|| std::sync::Arc::new(arrow::datatypes::Schema::empty()));
            let b = arrow::compute::concat_batches(&schema, &t.batches).unwrap();
            (t.table, b)
        })
        .collect()
}

/// A damage that changes a value into another value the format allows,
/// where it lies, and that no reader can tell from the intact one (see
/// docs/testing.md, "Damaged inputs"): `None` for any other.
fn undetectable(kind: &str, intact: &[u8], d: &Damage) -> Option<&'static str> {
    let byte = |at: usize| intact.get(at).copied().unwrap_or(0);
    let at = match *d {
        Damage::Flip { at, .. } | Damage::Number { at, .. } => at,
        // A timings file cut right after a call's closing blank line: the
        // file holds no count of its calls.
        Damage::Cut { len } if kind == "counts" && intact[..len].ends_with(b"\n\n") => {
            return Some("a timings file cut between two calls");
        }
        Damage::Cut { .. } => return None,
    };
    if let Damage::Flip { at, bit } = *d {
        let (a, b) = (byte(at), byte(at) ^ (1 << bit));
        if a.is_ascii_digit() && b.is_ascii_digit() {
            return Some("digit flipped into another digit");
        }
        if kind != "linktest" && a.is_ascii_alphanumeric() && b.is_ascii_alphanumeric() {
            return Some("letter or digit of a name flipped into another");
        }
    }
    // 2 GiB of memory: a node may have it (a multiple of 1 KiB, in range).
    if kind == "hostinfo"
        && matches!(
            d,
            Damage::Number {
                with: "2147483648",
                ..
            }
        )
        && intact[..at].ends_with(b"\"memory_bytes\": ")
    {
        return Some("memory made another plausible size");
    }
    if matches!(kind, "hostinfo" | "pio" | "ior") && in_json_string(intact, at) {
        return Some("inside a string of free text");
    }
    // The whitespace- or colon-separated field of the damaged line.
    let start = intact[..at]
        .iter()
        .rposition(|c| *c == b'\n')
        .map_or(0, |i| i + 1);
    let end = intact[at..]
        .iter()
        .position(|c| *c == b'\n')
        .map_or(intact.len(), |i| at + i);
    let line = &intact[start..end];
    let sep = if kind == "dimemas" { b':' } else { b' ' };
    let field = intact[start..at]
        .split(|c| *c == sep)
        .filter(|w| !w.is_empty())
        .count()
        - usize::from(intact[start..at].last().is_some_and(|c| *c != sep));
    let words: Vec<&[u8]> = line
        .split(|c| *c == sep)
        .filter(|w| !w.is_empty())
        .collect();
    let was = words.get(field).copied().unwrap_or_default();
    let with = match *d {
        Damage::Number { with, .. } => with.as_bytes(),
        _ => b"",
    };
    match (kind, words.first().copied(), words.get(3).copied()) {
        // A receive's source or tag made -1: any source, any tag, which MPI
        // programs post.
        ("bandela", Some(b"K"), Some(b"irecv")) if with == b"-1" && (field == 4 || field == 6) => {
            Some("a receive's source or tag made a wildcard (-1)")
        }
        ("dimemas", Some(b"3"), _) if with == b"-1" && (field == 3 || field == 6) => {
            Some("a receive's source or tag made a wildcard (-1)")
        }
        // A receive's buffer made larger: MPI receives into a buffer at
        // least as large as the message.
        ("bandela", Some(b"K"), Some(b"irecv")) | ("dimemas", Some(b"3"), _)
            if field == if kind == "bandela" { 7 } else { 5 } && parse(with) > parse(was) =>
        {
            Some("a receive's buffer made larger")
        }
        _ => None,
    }
}

fn parse(b: &[u8]) -> f64 {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Whether byte `at` of a JSON document is inside a string (its quotes
/// excluded).
fn in_json_string(doc: &[u8], at: usize) -> bool {
    let (mut inside, mut i) = (false, 0);
    while i < at {
        match doc[i] {
            b'\\' if inside => i += 1,
            b'"' => inside = !inside,
            _ => {}
        }
        i += 1;
    }
    inside && doc.get(at) != Some(&b'"')
}

/// A SION file holds no checksum: a damage that only moves stored times by
/// less than half (a flip in an `f64`'s mantissa), where no other figure
/// repeats them (the retests' new times), or in their last bits (within the
/// 10^-9 LinkTest's statistics are compared to), leaves a plausible
/// measurement that cannot be told from the real one.
fn last_bits(
    a: &BTreeMap<String, RecordBatch>,
    b: &BTreeMap<String, RecordBatch>,
) -> Option<&'static str> {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::Float64Type;
    for (t, x) in a {
        let y = b.get(t)?;
        if x.num_rows() != y.num_rows() || x.schema() != y.schema() {
            return None;
        }
        for i in 0..x.num_columns() {
            let (cx, cy) = (x.column(i), y.column(i));
            if cx == cy {
                continue;
            }
            let (fx, fy) = (
                cx.as_primitive_opt::<Float64Type>()?,
                cy.as_primitive_opt::<Float64Type>()?,
            );
            for k in 0..fx.len() {
                if fx.is_null(k) != fy.is_null(k) {
                    return None;
                }
                let (p, q) = (fx.value(k), fy.value(k));
                let off = (p - q).abs();
                if p != q && (off.is_nan() || off > 0.5 * p.abs().max(q.abs())) {
                    return None;
                }
            }
        }
    }
    Some("a stored time moved within its mantissa")
}

/// The (table.column)s whose values differ.
fn differing(a: &BTreeMap<String, RecordBatch>, b: &BTreeMap<String, RecordBatch>) -> String {
    let mut v = Vec::new();
    for (t, x) in a {
        let Some(y) = b.get(t) else {
            v.push(format!("{t} missing"));
            continue;
        };
        if x.num_rows() != y.num_rows() {
            v.push(format!("{t}: {} rows, not {}", y.num_rows(), x.num_rows()));
            continue;
        }
        for (i, f) in x.schema().fields().iter().enumerate() {
            if x.column(i) != y.column(i) {
                v.push(format!("{t}.{}", f.name()));
            }
        }
    }
    v.join(", ")
}

#[derive(Default, Debug)]
struct Tally {
    damaged: usize,
    refused: usize,
    refused_without_position: usize,
    identical: usize,
    undetectable: usize,
    /// Undetectable damage by kind.
    why: BTreeMap<&'static str, usize>,
    different: usize,
    panicked: usize,
}

fn campaign(s: &Sample, rng: &mut Rng, corpus: Option<&Path>) -> (Tally, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    for (n, b) in &s.files {
        std::fs::write(dir.path().join(n), b).unwrap();
    }
    let inputs: Vec<InputFile> = s
        .files
        .iter()
        .map(|(n, _)| InputFile {
            path: dir.path().join(n),
            source: n.clone(),
        })
        .collect();
    let ctx = IngestContext {
        run_id: "r".into(),
        date: "2026-11-22".into(),
    };
    let intact =
        tables(ingest(s.kind, &inputs, &ctx).unwrap_or_else(|e| panic!("{}: {e}", s.kind)));
    let mut t = Tally::default();
    let mut notes = Vec::new();
    for (i, (f, d)) in damages(s, rng).into_iter().enumerate() {
        let (name, data) = &s.files[f];
        let bad = apply(data, &d, s.binary);
        if bad == *data {
            // e.g. a number replaced by itself: not damage.
            continue;
        }
        t.damaged += 1;
        let path = dir.path().join(name);
        std::fs::write(&path, &bad).unwrap();
        if let Some(c) = corpus {
            let kd = c.join(s.kind);
            std::fs::create_dir_all(&kd).unwrap();
            std::fs::write(kd.join(format!("{i:03}-{name}")), &bad).unwrap();
        }
        let r = std::panic::catch_unwind(|| ingest(s.kind, &inputs, &ctx));
        std::fs::write(&path, data).unwrap();
        match r {
            Err(_) => {
                t.panicked += 1;
                notes.push(format!("{} {name} {d:?}: PANIC", s.kind));
            }
            Ok(Err(e)) => {
                t.refused += 1;
                let msg = e.to_string();
                // Across files (bandela's ranks) the error names both sides.
                let named = msg.contains(&path.display().to_string());
                let positioned = msg.contains("byte offset");
                if !(matches!(e, FormatError::Malformed { .. }) && named && positioned) {
                    t.refused_without_position += 1;
                    notes.push(format!(
                        "{} {name} {d:?}: refused without position: {msg}",
                        s.kind
                    ));
                }
            }
            Ok(Ok(out)) => {
                let out = tables(out);
                if out == intact {
                    t.identical += 1;
                } else if let Some(why) = undetectable(s.kind, data, &d).or_else(|| {
                    (s.kind == "linktest")
                        .then(|| last_bits(&intact, &out))
                        .flatten()
                }) {
                    t.undetectable += 1;
                    *t.why.entry(why).or_default() += 1;
                } else {
                    t.different += 1;
                    let bad_ctx = {
                        let at = match d {
                            Damage::Cut { len } => len,
                            Damage::Flip { at, .. } | Damage::Number { at, .. } => at,
                        };
                        String::from_utf8_lossy(
                            &bad[at.saturating_sub(30)..(at + 20).min(bad.len())],
                        )
                        .into_owned()
                    };
                    let ctxt = match d {
                        Damage::Cut { len } => String::from_utf8_lossy(
                            &data[len.saturating_sub(30)..(len + 10).min(data.len())],
                        )
                        .into_owned(),
                        Damage::Flip { at, .. } | Damage::Number { at, .. } => {
                            String::from_utf8_lossy(
                                &data[at.saturating_sub(30)..(at + 20).min(data.len())],
                            )
                            .into_owned()
                        }
                    };
                    notes.push(format!(
                        "{} {name} {d:?}: ACCEPTED DIFFERENT ({}) near {ctxt:?} -> {bad_ctx:?}",
                        s.kind,
                        differing(&intact, &out)
                    ));
                }
            }
        }
    }
    (t, notes)
}

#[test]
fn damaged_inputs_are_refused_or_read_unchanged() {
    let corpus = std::env::var_os("DAMAGE_CORPUS_OUT").map(PathBuf::from);
    let mut rng = Rng(SEED);
    let mut failed = Vec::new();
    println!(
        "{:<9} {:>7} {:>7} {:>9} {:>13} {:>9}",
        "kind", "damaged", "refused", "identical", "undetectable", "different"
    );
    for s in samples() {
        let (t, notes) = campaign(&s, &mut rng, corpus.as_deref());
        println!(
            "{:<9} {:>7} {:>7} {:>9} {:>13} {:>9}",
            s.kind, t.damaged, t.refused, t.identical, t.undetectable, t.different
        );
        for (why, n) in &t.why {
            println!("  undetectable: {n} × {why}");
        }
        for n in &notes {
            println!("  {n}");
        }
        if t.different > 0 || t.panicked > 0 || t.refused_without_position > 0 {
            failed.push(format!("{}: {t:?}", s.kind));
        }
    }
    if std::env::var_os("DAMAGE_REPORT_ONLY").is_none() {
        assert!(failed.is_empty(), "{failed:#?}");
    }
}

/// The checks added against damage refuse no intact real input: every IOR
/// and mdtest run, every Dimemas trace of the shared data.
#[test]
fn every_intact_real_input_is_still_accepted() {
    let ctx = IngestContext {
        run_id: "r".into(),
        date: "2026-11-22".into(),
    };
    let one = |kind: &str, p: PathBuf| {
        ingest(kind, &[InputFile::from_path(&p)], &ctx)
            .unwrap_or_else(|e| panic!("{kind} {}: {e}", p.display()));
    };
    for case in std::fs::read_dir(shared("io")).unwrap() {
        let dir = case.unwrap().path();
        for f in ["summary.json", "human.txt", "rank_details.csv"] {
            let p = dir.join(f);
            if !p.exists() {
                continue;
            }
            let mdtest = dir.to_string_lossy().contains("mdtest");
            if mdtest && f == "summary.json" {
                continue;
            }
            one(if mdtest { "mdtest" } else { "ior" }, p);
        }
    }
    for t in std::fs::read_dir(shared("replay/dimemas/traces")).unwrap() {
        one("dimemas", t.unwrap().path());
    }
}
