//! The commands that work on files, without a coordinator (or beside it):
//! `ingest`, `probe`, `analyze`, `inspect`, `report`.
use super::*;

/// `benchlake ingest`.
#[derive(Debug, Args)]
pub struct IngestArgs {
    /// Ingest kind (see --list).
    #[arg(required_unless_present = "list")]
    pub kind: Option<String>,
    /// Input files or directories (directories are read recursively). A
    /// run's raw bundle (`raw/RUN_ID/bundle.tar.zst`) is read as its
    /// members of KIND, each with its raw key as `source`.
    pub paths: Vec<PathBuf>,
    /// Where the lake layout is written: a directory, file:///dir or
    /// s3://bucket[/prefix] (with the --s3-* settings).
    #[arg(long, required_unless_present = "list")]
    pub out: Option<String>,
    #[command(flatten)]
    pub s3: crate::opts::S3Args,
    /// Run id of the rows (default: a new id).
    #[arg(long)]
    pub run_id: Option<String>,
    /// Date partition (default: today, UTC).
    #[arg(long)]
    pub date: Option<String>,
    /// List the known kinds.
    #[arg(long)]
    pub list: bool,
}

fn expand(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        let md = std::fs::metadata(p).with_context(|| format!("{}", p.display()))?;
        if md.is_dir() {
            expand_dir(p, &mut out)?;
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// The files under directory `dir`, recursively, in name order. An entry's
/// type comes from the directory listing (no stat per file); symbolic links
/// are followed as before.
fn expand_dir(dir: &std::path::Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let mut entries: Vec<(PathBuf, bool)> = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("{}", dir.display()))? {
        let Ok(e) = e else { continue };
        let path = e.path();
        let is_dir = match e.file_type() {
            Ok(t) if !t.is_symlink() => t.is_dir(),
            _ => std::fs::metadata(&path)
                .with_context(|| format!("{}", path.display()))?
                .is_dir(),
        };
        entries.push((path, is_dir));
    }
    entries.sort();
    for (path, is_dir) in entries {
        if is_dir {
            expand_dir(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

pub async fn ingest(a: IngestArgs) -> anyhow::Result<()> {
    if a.list {
        for (k, d) in benchlake_formats::kinds() {
            outln!("{k:<12} {d}");
        }
        return Ok(());
    }
    let (Some(kind), Some(out)) = (a.kind, a.out) else {
        bail!("give KIND, PATHS and --out");
    };
    if a.paths.is_empty() {
        bail!("no input paths");
    }
    // A kind that skips unrelated files (logs, COMMANDS.txt) found inside the
    // directories it is given (counts) still reads a file named on the command
    // line: one it would skip is an error (docs/counts.md).
    if let Some(check) = benchlake_formats::kinds::get(&kind).and_then(|k| k.named_file) {
        for p in a.paths.iter().filter(|p| p.is_file()) {
            check(&benchlake_formats::InputFile::from_path(p))?;
        }
    }
    let files = expand(&a.paths)?;
    benchlake_core::mem::keep_heap_headroom_for_many_files(files.len());
    // A run's raw bundle (`raw/RUN/bundle.tar.zst`, a copy of one, or a
    // lake's raw/ directory holding some) is read as its members, each
    // under its raw key: the rows are those the run's ingest jobs wrote.
    let unpacked = tempfile::tempdir().context("temporary directory for raw bundles")?;
    let mut inputs: Vec<benchlake_formats::InputFile> = Vec::with_capacity(files.len());
    for f in &files {
        if f.file_name().and_then(|n| n.to_str()) != Some(benchlake_core::layout::RAW_BUNDLE_FILE) {
            inputs.push(benchlake_formats::InputFile::from_path(f));
            continue;
        }
        let data = std::fs::read(f).with_context(|| format!("{}", f.display()))?;
        let dir = unpacked.path().join(format!("{:05}", inputs.len()));
        let label = f.display().to_string();
        // Only the members of this kind (a member of no recorded format is
        // read too): the nodes' logs ride in the same bundle.
        for (path, m) in benchlake_core::lake::bundle::extract_copy(&label, &data, &dir)? {
            if m.format.is_empty() || m.format == kind {
                inputs.push(benchlake_formats::InputFile {
                    path,
                    source: m.key,
                });
            }
        }
    }
    let run_id = a.run_id.unwrap_or_else(benchlake_core::ids::new_id);
    benchlake_core::ids::validate_id("run_id", &run_id)?;
    let date = a
        .date
        .unwrap_or_else(|| chrono::Utc::now().format("%Y-%m-%d").to_string());
    let started = std::time::Instant::now();
    let lake = benchlake_core::lake::Lake::open(&a.s3.store_at(&out))?;
    // One glob cannot read two layouts: an old lake moves first.
    // (A bucket that does not exist yet holds nothing: the first put creates it.)
    let legacy = match lake.legacy_table_files().await {
        Err(e) if e.to_string().contains("NoSuchBucket") => Vec::new(),
        r => r?,
    };
    if let Some((k, _)) = legacy.first() {
        bail!(
            "{out}: the lake holds table files of the layout before 2026-12 (such as {k}); \
             move it first with `benchlake tables migrate --lake {out}`"
        );
    }
    // A large table of a local lake is written to a temporary file in the
    // lake's directory and renamed into place (no buffer the size of the
    // file); one left by a killed ingest is named `.benchlake-*.parquet.tmp`.
    let spill = match lake.local_dir() {
        Some(d) => {
            std::fs::create_dir_all(d)
                .with_context(|| format!("cannot create the lake directory {}", d.display()))?;
            Some(d.to_path_buf())
        }
        None => None,
    };
    // Read and encode in one go: the LinkTest reader streams its pair times
    // into the Parquet file a row group at a time.
    // The summary tables (`linktest_host_summary`, `io_node_summary`) are
    // derived from the encoded tables as the worker's ingest job derives them
    // (default slow-pair rule: offline ingests have no run parameters).
    let tables = tokio::task::spawn_blocking({
        let run_id = run_id.clone();
        let date = date.clone();
        move || -> anyhow::Result<Vec<benchlake_core::lake::EncodedTable>> {
            let mut tables = benchlake_formats::ingest_encoded_in(
                &kind,
                &inputs,
                &benchlake_formats::IngestContext {
                    run_id: run_id.clone(),
                    date: date.clone(),
                },
                spill.as_deref(),
            )?;
            let summaries = benchlake_analysis::summaries::derive(
                &kind,
                &run_id,
                &tables,
                &[],
                &Default::default(),
            )?;
            for t in &summaries {
                tables.push(benchlake_core::lake::EncodedTable::encode(t, &date)?);
            }
            Ok(tables)
        }
    })
    .await??;
    let job = benchlake_core::ids::new_id();
    let keys = lake
        .write_final_encoded(&tables, &date, &run_id, &job)
        .await?;
    let root = lake.root().trim_end_matches('/').to_string();
    for (t, k) in tables.iter().zip(&keys) {
        outln!("{:<22} {:>10} rows  {root}/{k}", t.table, t.rows);
    }
    drop(unpacked);
    eprintln!(
        "{} file(s) in {:.3} s; read them with: duckdb -c \"SELECT * FROM read_parquet('{}/{}', hive_partitioning=true) LIMIT 10\"",
        files.len(),
        started.elapsed().as_secs_f64(),
        root,
        benchlake_core::layout::table_glob(
            tables.first().map(|t| t.table.as_str()).unwrap_or("TABLE")
        )?
    );
    Ok(())
}

#[derive(Debug, Subcommand)]
pub enum ProbeCmd {
    /// Replay a labelled synthetic history (nightly hostinfo, pio and
    /// LinkTest runs of a scenario's nodes, with its faults and events)
    /// through the ingest, checks and record jobs, and score the verdicts:
    /// recall, attribution, detection delay, false alarms (docs/verdicts.md).
    Year(crate::year::YearArgs),
    /// Load a running coordinator as a large site does — simulated agents
    /// heartbeating, submitters, pollers and readers — and print each call's
    /// latency percentiles (docs/testing.md, "Coordinator"); exit 1 when a
    /// call failed. For a test deployment: the simulated agents stay
    /// registered.
    Load(crate::probe_load::LoadArgs),
    /// Write a synthetic LinkTest 2.1.17 result file (SION) of N ranks, to test
    /// a pipeline at scale: pair times of 2–12 µs, one host 4× slower, and the
    /// pair 1 → N−1 the slowest (317 µs, retested at 4.2 µs). Deterministic per
    /// seed; the ingest bench measures the same generator.
    Linktest {
        /// Number of ranks (2–65536; 4,096 ranks make 285 MB).
        #[arg(long)]
        ranks: usize,
        /// Ranks per host (host names node0000, node0001, …).
        #[arg(long, default_value_t = 48)]
        ranks_per_host: usize,
        /// Seed of the pair times.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Bytes per message: each pair's time gains size / bandwidth (10 GB/s
        /// between hosts, 40 GB/s within one), so files at several sizes
        /// calibrate like a real sweep (`replay calibrate`). Without it, the
        /// file says 1 MiB and its times do not depend on it.
        #[arg(long)]
        message_size: Option<u64>,
        /// The file to write.
        #[arg(long)]
        out: PathBuf,
    },
    /// Write this node's facts (kernel, CPU, memory, load) as JSON.
    Host {
        #[arg(long)]
        out: PathBuf,
        /// In a Slurm task, insert the Slurm node name into the file name
        /// (`host.json` → `host-n2.json`), so the tasks of one `srun` on
        /// several nodes sharing a directory write one file each.
        #[arg(long)]
        per_node: bool,
    },
    /// Write a small synthetic alltoallv profiler output (compact count files in
    /// the profiler's format version 9 grammar) of two lead ranks: lead 0 on an
    /// 8-rank communicator (12 calls cycling over a ring, a dense and a
    /// one-to-all pattern) and lead 4 on a 4-rank one (2 dense calls). The
    /// `a2av-demo` benchmark of `benchlake up --demo`.
    Counts {
        #[arg(long)]
        out: PathBuf,
    },
    /// Write a synthetic Dimemas trace (.dim): the 1-D periodic halo of the
    /// reference runs (shared/data/replay/dimemas/tools/synth.py), per rank and
    /// iteration a compute burst, 2 Irecv, 2 Isend and 2 Wait, with an 8-byte
    /// Allreduce every 10 iterations. 1,024 ranks × 1,000 iterations make
    /// 7.3 M records (182 MB), the size `bench/replay_speed.py` replays.
    Dimemas {
        /// Number of ranks (2–65536).
        #[arg(long)]
        ranks: u32,
        /// Iterations (1–1000000).
        #[arg(long, default_value_t = 100)]
        iters: u32,
        /// The file to write.
        #[arg(long)]
        out: PathBuf,
    },
    /// Write the same halo as a Bandela trace directory (`bandela.<rank>.txt`,
    /// per iteration a burst, 2 irecv, 2 isend and 4 waits; the Allreduce is a
    /// barrier) and the replaympi input to replay it with
    /// (`DIR/replaympi.input`: one host, 2 µs, 800 MB/s):
    /// `benchlake replay bandela DIR --input DIR/replaympi.input`.
    Bandela {
        /// Number of ranks (2–65536).
        #[arg(long)]
        ranks: u32,
        /// Iterations (1–1000000).
        #[arg(long, default_value_t = 100)]
        iters: u32,
        /// The directory to write (created if needed).
        #[arg(long)]
        out: PathBuf,
    },
}

/// Rank lists as the profiler writes them (`0-3, 5`).
fn rank_list(ids: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let mut j = i;
        while j + 1 < ids.len() && ids[j] + 1 == ids[j + 1] {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}-{}", ids[i], ids[j])
        } else {
            ids[i].to_string()
        });
        i = j + 1;
    }
    parts.join(", ")
}

/// One block of a compact count file.
fn counts_block(out: &mut String, dt: u64, header: &str, calls: &[usize], m: &[Vec<u64>]) {
    use std::fmt::Write;
    let _ = write!(
        out,
        "# Raw counters\n\nNumber of ranks: {}\nDatatype size: {dt}\nAlltoallv calls {header}\nCount: {} calls - {}\n\n\nBEGINNING DATA\n",
        m.len(),
        calls.len(),
        rank_list(calls)
    );
    // Ranks with identical rows share one row, ordered by their first rank.
    let mut groups: Vec<(&Vec<u64>, Vec<usize>)> = Vec::new();
    for (r, row) in m.iter().enumerate() {
        match groups.iter_mut().find(|g| g.0 == row) {
            Some(g) => g.1.push(r),
            None => groups.push((row, vec![r])),
        }
    }
    for (row, ranks) in groups {
        let _ = write!(out, "Rank(s) {}: ", rank_list(&ranks));
        for c in row {
            let _ = write!(out, "{c} ");
        }
        out.push('\n');
    }
    out.push_str("END DATA\n");
}

/// Writes the demo's compact count files into `dir`.
pub fn write_demo_counts(dir: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
    let ring = |n: usize| -> Vec<Vec<u64>> {
        (0..n)
            .map(|r| {
                (0..n)
                    .map(|j| if j == (r + 1) % n { 1 + r as u64 } else { 0 })
                    .collect()
            })
            .collect()
    };
    let dense = |n: usize, c: u64| -> Vec<Vec<u64>> { vec![vec![c; n]; n] };
    let one_to_all = |n: usize| -> Vec<Vec<u64>> {
        (0..n)
            .map(|r| {
                (0..n)
                    .map(|j| if r == 0 && j != 0 { 100 } else { 0 })
                    .collect()
            })
            .collect()
    };
    let transpose = |m: &Vec<Vec<u64>>| -> Vec<Vec<u64>> {
        (0..m.len())
            .map(|i| m.iter().map(|row| row[i]).collect())
            .collect()
    };
    let lead0 = [ring(8), dense(8, 10), one_to_all(8)];
    let (mut send0, mut recv0) = (String::new(), String::new());
    for (p, m) in lead0.iter().enumerate() {
        let calls: Vec<usize> = (0..12).filter(|c| c % 3 == p).collect();
        counts_block(&mut send0, 4, "0-11", &calls, m);
        counts_block(&mut recv0, 4, "0-11", &calls, &transpose(m));
    }
    let m = dense(4, 5);
    let (mut send4, mut recv4) = (String::new(), String::new());
    counts_block(&mut send4, 8, "0-13", &[12, 13], &m);
    counts_block(&mut recv4, 8, "0-13", &[12, 13], &transpose(&m));
    for (name, text) in [
        ("send-counters.job0.rank0.txt", send0),
        ("recv-counters.job0.rank0.txt", recv0),
        ("send-counters.job0.rank4.txt", send4),
        ("recv-counters.job0.rank4.txt", recv4),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, text).with_context(|| p.display().to_string())?;
    }
    Ok(())
}

/// The synthetic halo of `probe dimemas` and `probe bandela`, its size
/// checked.
fn halo(ranks: u32, iters: u32) -> anyhow::Result<benchlake_replay::synth::Halo> {
    if !(2..=65_536).contains(&ranks) {
        bail!("--ranks {ranks}: give 2 to 65536 ranks");
    }
    if !(1..=1_000_000).contains(&iters) {
        bail!("--iters {iters}: give 1 to 1000000 iterations");
    }
    Ok(benchlake_replay::synth::Halo::new(ranks, iters))
}

pub fn probe(c: ProbeCmd) -> anyhow::Result<()> {
    match c {
        ProbeCmd::Linktest {
            ranks,
            ranks_per_host,
            seed,
            message_size,
            out,
        } => {
            if !(2..=65_536).contains(&ranks) {
                bail!("--ranks {ranks}: give 2 to 65536 ranks");
            }
            if ranks_per_host == 0 || ranks_per_host > ranks {
                bail!("--ranks-per-host {ranks_per_host}: give 1 to --ranks ({ranks})");
            }
            let t = std::time::Instant::now();
            let mut run =
                benchlake_formats::linktest::synth::synthetic_run(ranks, ranks_per_host, seed);
            if let Some(b) = message_size {
                if !(1..=1 << 30).contains(&b) {
                    bail!("--message-size {b}: give 1 to 1073741824 bytes");
                }
                run = benchlake_formats::linktest::synth::with_message_size(run, b);
            }
            benchlake_formats::linktest::v2::write_file(
                &run,
                &out,
                &benchlake_formats::sion::SionWriteOptions::default(),
            )
            .with_context(|| format!("writing {}", out.display()))?;
            let bytes = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
            outln!(
                "{}: LinkTest 2.1.17, {ranks} ranks on {} hosts, {} pair times, {:.1} MB in {:.2} s",
                out.display(),
                ranks.div_ceil(ranks_per_host),
                ranks * (ranks - 1),
                bytes as f64 / 1e6,
                t.elapsed().as_secs_f64()
            );
        }
        ProbeCmd::Dimemas { ranks, iters, out } => {
            let t = std::time::Instant::now();
            let records = halo(ranks, iters)?
                .write_dim(&out)
                .with_context(|| format!("writing {}", out.display()))?;
            let bytes = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
            outln!(
                "{}: Dimemas halo trace, {ranks} ranks, {iters} iterations, {records} records, {:.1} MB in {:.2} s",
                out.display(),
                bytes as f64 / 1e6,
                t.elapsed().as_secs_f64()
            );
        }
        ProbeCmd::Bandela { ranks, iters, out } => {
            let t = std::time::Instant::now();
            let records = halo(ranks, iters)?
                .write_bandela(&out)
                .with_context(|| format!("writing {}", out.display()))?;
            outln!(
                "{}: Bandela halo trace, {ranks} rank files, {iters} iterations, {records} records, input {} in {:.2} s",
                out.display(),
                out.join("replaympi.input").display(),
                t.elapsed().as_secs_f64()
            );
        }
        ProbeCmd::Host { out, per_node } => {
            let f = benchlake_formats::hostinfo::collect();
            let out = match (&f.node, per_node) {
                (Some(node), true) => {
                    let stem = out.file_stem().map(|s| s.to_string_lossy().into_owned());
                    let ext = out.extension().map(|s| s.to_string_lossy().into_owned());
                    let name = match (stem, ext) {
                        (Some(s), Some(e)) => format!("{s}-{node}.{e}"),
                        (Some(s), None) => format!("{s}-{node}"),
                        _ => format!("host-{node}.json"),
                    };
                    out.with_file_name(name)
                }
                _ => out,
            };
            std::fs::write(&out, serde_json::to_string_pretty(&f)?)
                .with_context(|| format!("{}", out.display()))?;
        }
        ProbeCmd::Counts { out } => write_demo_counts(&out)?,
        ProbeCmd::Year(a) => crate::year::run(a)?,
        ProbeCmd::Load(_) => bail!("probe load runs on the async runtime (main)"),
    }
    Ok(())
}

#[derive(Debug, Subcommand)]
pub enum AnalyzeCmd {
    /// alltoallv pattern analysis. Offline, of a profiler output directory: the
    /// Go tools' text reports in OUT/reports and the analysis tables in OUT's lake
    /// layout. Through the cluster, of a run id: an analysis run fanned out over
    /// the workers, whose reports are downloaded to OUT.
    Counts {
        /// The profiler output directory, or the id of a run whose `counts`
        /// outputs are analysed through the cluster.
        dir: PathBuf,
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        /// Messages of at most this many bytes are small.
        #[arg(long, default_value_t = 200)]
        size_threshold: u64,
        /// Fix the Go tools' quirks instead of reproducing them (see docs/counts.md).
        #[arg(long)]
        no_reference_compat: bool,
        /// Run id of the rows (default: a new id; offline only).
        #[arg(long)]
        run_id: Option<String>,
        /// Split compact pairs larger than this many bytes into parts (block
        /// ranges); per-call files are grouped into parts of about this size.
        #[arg(long)]
        max_part_bytes: Option<u64>,
        /// Threads of an offline analysis (default: the cores available). With
        /// 2 or more the files of a compact pair are read side by side (the
        /// recv file cut at block starts into chunks the threads share), and the
        /// reports are written on their own thread while the tables are built
        /// and written; the outputs are the same whatever the number.
        #[arg(long, env = benchlake_analysis::counts::THREADS_ENV, value_parser = clap::value_parser!(u32).range(1..=1024))]
        threads: Option<u32>,
        #[command(flatten)]
        conn: Conn,
    },
}

pub async fn analyze(c: AnalyzeCmd) -> anyhow::Result<()> {
    match c {
        AnalyzeCmd::Counts {
            dir,
            out,
            size_threshold,
            no_reference_compat,
            run_id,
            max_part_bytes,
            threads,
            conn,
        } => {
            if !dir.exists()
                && let Some(id) = dir.to_str()
                && benchlake_core::ids::validate_id("run_id", id).is_ok()
            {
                let mut options = std::collections::HashMap::new();
                options.insert("size_threshold".to_string(), size_threshold.to_string());
                options.insert(
                    "reference_compat".to_string(),
                    (!no_reference_compat).to_string(),
                );
                if let Some(m) = max_part_bytes {
                    options.insert("max_part_bytes".to_string(), m.to_string());
                }
                return analyze_counts_remote(&conn, id, options, &out).await;
            }
            if !dir.is_dir() {
                anyhow::bail!("{}: neither a directory nor a run id", dir.display());
            }
            let mut opts = benchlake_analysis::counts::Options {
                size_threshold,
                reference_compat: !no_reference_compat,
                ..Default::default()
            };
            if let Some(m) = max_part_bytes {
                opts.max_part_bytes = m.max(1);
            }
            let reports = out.join("reports");
            std::fs::create_dir_all(&reports).with_context(|| reports.display().to_string())?;
            let run_id = run_id.unwrap_or_else(benchlake_core::ids::new_id);
            benchlake_core::ids::validate_id("run_id", &run_id)?;
            let threads =
                threads.map_or_else(benchlake_analysis::counts::default_threads, |n| n as usize);
            let started = std::time::Instant::now();
            let (d, r, rid) = (dir.clone(), reports.clone(), run_id.clone());
            let (tables, reports_thread) =
                tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
                    use benchlake_analysis::counts::{report, tables};
                    let a = std::sync::Arc::new(benchlake_analysis::counts::analyze_input_dir(
                        &d, &opts, threads,
                    )?);
                    if threads < 2 {
                        report::write_all(&a, &r)?;
                        return Ok((tables::tables(&a, &rid)?, None));
                    }
                    // The reports (two of them 117 MB at 1,024 ranks and 5,000
                    // calls) are written while the tables are built and encoded.
                    let shared = a.clone();
                    let h = std::thread::Builder::new()
                        .name("counts-reports".into())
                        .spawn(move || report::write_all(&shared, &r))?;
                    match tables::tables(&a, &rid) {
                        Ok(t) => Ok((t, Some(h))),
                        Err(e) => {
                            let _ = h.join();
                            Err(e.into())
                        }
                    }
                })
                .await??;
            let lake = benchlake_core::lake::Lake::local(&out)?;
            let date = chrono::Utc::now().format("%Y-%m-%d").to_string();
            let written = lake
                .write_final(&tables, &date, &run_id, &benchlake_core::ids::new_id())
                .await;
            if let Some(h) = reports_thread {
                tokio::task::spawn_blocking(move || h.join())
                    .await?
                    .map_err(|_| anyhow::anyhow!("the reports thread panicked"))??;
            }
            let keys = written?;
            for (t, k) in tables.iter().zip(&keys) {
                outln!(
                    "{:<24} {:>10} rows  {}",
                    t.table,
                    t.rows(),
                    out.join(k).display()
                );
            }
            outln!("reports in {}", reports.display());
            eprintln!("analysed in {:.3} s", started.elapsed().as_secs_f64());
        }
    }
    Ok(())
}

/// `benchlake inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// A SION file (file 0 of a multi-file set).
    pub file: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn inspect(a: InspectArgs) -> anyhow::Result<()> {
    let i = benchlake_formats::linktest::inspect_file(&a.file)?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&i)?);
    } else {
        out!("{}", i.to_text());
    }
    Ok(())
}

#[derive(Debug, Subcommand)]
pub enum ReportCmd {
    /// LinkTest report page (SVG and PNG): rank×rank time matrix with host
    /// boundaries, histogram, summary table with the slowest pairs and retests,
    /// host pairs above a threshold, host×host matrix, and the run's checks.
    Linktest(LinktestReportArgs),
}

/// `benchlake report linktest`.
#[derive(Debug, Args)]
pub struct LinktestReportArgs {
    /// A LinkTest SION file (1.x, 2.1.17 or netprobe), or the id of a run whose
    /// linktest tables are in the lake (`--lake`).
    pub target: String,
    /// Output: a `.svg` file (the PNG is written beside it, same name `.png`), or
    /// a directory (created; `linktest-<run id or file name>.svg/.png` in it).
    #[arg(long, default_value = "linktest-report.svg")]
    pub out: PathBuf,
    /// Host pairs whose maximum time is above this many microseconds are listed
    /// (default: 2 × the median pair time).
    #[arg(long, env = "BENCHLAKE_REPORT_THRESHOLD_US")]
    pub threshold_us: Option<f64>,
    /// Rank permutation to draw.
    #[arg(long, default_value_t = 0)]
    pub permutation: usize,
    /// Slowest pairs listed.
    #[arg(long, default_value_t = 10)]
    pub top_pairs: usize,
    /// With a run id holding several LinkTest files: the `source` to draw (default:
    /// the first in sort order).
    #[arg(long)]
    pub source: Option<String>,
    /// Skip the PNG.
    #[arg(long)]
    pub no_png: bool,
    #[command(flatten)]
    pub lake: crate::opts::LakeArgs,
}

pub async fn report(c: ReportCmd) -> anyhow::Result<()> {
    use benchlake_analysis::{linktest_lake, linktest_report as lr};
    match c {
        ReportCmd::Linktest(a) => {
            let path = PathBuf::from(&a.target);
            let (run, name, checks, title) = if path.exists() {
                let run = benchlake_formats::linktest::read_file(&path)?;
                let name = path
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "file".into());
                (run, name, Vec::new(), format!("{}", path.display()))
            } else {
                benchlake_core::ids::validate_id("run_id", &a.target)
                    .with_context(|| format!("'{}' is neither a file nor a run id", a.target))?;
                if a.lake.lake.is_none() {
                    bail!(
                        "a run id needs the lake: give --lake DIR|s3://bucket (or BENCHLAKE_LAKE)"
                    );
                }
                let lake = benchlake_core::lake::Lake::open(&a.lake.store(""))?;
                let (run, source) =
                    linktest_lake::load_run(&lake, &a.target, a.source.as_deref()).await?;
                let checks = linktest_lake::load_checks(&lake, &a.target).await?;
                (
                    run,
                    a.target.clone(),
                    checks,
                    format!("run {} ({source})", a.target),
                )
            };
            let opts = lr::ReportOptions {
                permutation: a.permutation,
                threshold_s: a.threshold_us.map(|t| t * 1e-6),
                top_pairs: a.top_pairs,
                title,
                ..Default::default()
            };
            let mut summary = lr::summarize(&run, &opts)?;
            summary.checks = checks;
            let svg_path = if a.out.is_dir() || a.out.extension().is_none() {
                std::fs::create_dir_all(&a.out).with_context(|| a.out.display().to_string())?;
                a.out.join(format!("linktest-{name}.svg"))
            } else {
                a.out.clone()
            };
            let svg = lr::render_svg(&summary);
            std::fs::write(&svg_path, &svg).with_context(|| svg_path.display().to_string())?;
            outln!("wrote {}", svg_path.display());
            if !a.no_png {
                let png_path = svg_path.with_extension("png");
                std::fs::write(&png_path, lr::render_png(&svg)?)
                    .with_context(|| png_path.display().to_string())?;
                outln!("wrote {}", png_path.display());
            }
            outln!(
                "{} ranks on {} hosts: min {}, avg {}, max {}; {} host pairs above {}; {} checks ({} not passed)",
                summary.num_tasks,
                summary.hosts.len(),
                lr::fmt::time(summary.min_s),
                lr::fmt::time(summary.avg_s),
                lr::fmt::time(summary.max_s),
                summary.hot_host_pairs.len(),
                lr::fmt::time(summary.threshold_s),
                summary.checks.len(),
                summary.checks.iter().filter(|c| c.status != "PASS").count()
            );
        }
    }
    Ok(())
}

/// `benchlake analyze counts RUN_ID --out DIR`: asks the coordinator for an
/// analysis run (`AnalyzeRun`), follows it with a progress line, then
/// downloads its reports (`DownloadReports`) into `out`.
async fn analyze_counts_remote(
    conn: &Conn,
    run_id: &str,
    options: std::collections::HashMap<String, String>,
    out: &std::path::Path,
) -> anyhow::Result<()> {
    let r = conn
        .runs()?
        .analyze_run(pb::AnalyzeRunRequest {
            run_id: run_id.to_string(),
            analysis: "counts".into(),
            options,
        })
        .await?
        .into_inner();
    eprintln!(
        "analysis run {} of run {run_id} (plan job {})",
        r.run_id,
        r.job_ids.join(", ")
    );
    let d = watch(conn, &r.run_id, false).await?;
    let ok = d.run.as_ref().map(|x| x.state) == Some(pb::RunState::Succeeded as i32);
    if !ok {
        print_detail(&d);
        anyhow::bail!(
            "analysis run {} did not succeed: {}",
            r.run_id,
            d.run.as_ref().map(|x| x.error.clone()).unwrap_or_default()
        );
    }
    let prefix = benchlake_core::layout::reports_rel(&r.run_id, &r.reports_prefix)
        .unwrap_or_default()
        .to_string();
    std::fs::create_dir_all(out).with_context(|| out.display().to_string())?;
    let mut stream = conn
        .runs()?
        .download_reports(pb::DownloadReportsRequest {
            run_id: r.run_id.clone(),
            prefix,
        })
        .await?
        .into_inner();
    let mut files = 0usize;
    let mut bytes = 0u64;
    let mut cur: Option<(String, std::fs::File)> = None;
    while let Some(c) = stream.message().await? {
        use std::io::Write;
        // Names come from the coordinator; keep them plain file names under `out`.
        benchlake_core::layout::validate_name("report", &c.name)?;
        if cur.as_ref().map(|x| x.0.as_str()) != Some(c.name.as_str()) {
            let p = out.join(&c.name);
            let f = std::fs::File::create(&p).with_context(|| p.display().to_string())?;
            cur = Some((c.name.clone(), f));
            files += 1;
        }
        if let Some((_, f)) = cur.as_mut() {
            f.write_all(&c.data)?;
        }
        bytes += c.data.len() as u64;
    }
    outln!(
        "analysis run {}: {files} report files ({bytes} bytes) in {}",
        r.run_id,
        out.display()
    );
    Ok(())
}
