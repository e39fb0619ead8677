//! `benchlake analyze counts DIR --out OUT` as users run it, on one thread and on
//! several (`--threads`, `BENCHLAKE_COUNTS_THREADS`): a compact pair large
//! enough for its recv file to be cut into shares, and the profiler output of
//! `../shared/data/counts/a2av_cases_np4`. The reports and the Parquet tables
//! must be the same bytes whatever the number of threads, and a malformed file
//! the same error naming the same line.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_benchlake"))
}

/// A compact pair of `blocks` blocks of `n` ranks, rows grouped as the profiler
/// groups them (the send rows in 4 groups, every recv row its own): the recv
/// file is about 16 × the send file.
fn write_pair(dir: &Path, n: u64, blocks: u64) -> (PathBuf, PathBuf) {
    let mut x = 7u64;
    let mut rnd = move |m: u64| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) % m
    };
    let (mut send, mut recv) = (String::new(), String::new());
    for b in 0..blocks {
        let calls = format!("{}-{}", b * 3, b * 3 + rnd(3));
        let k = calls
            .split('-')
            .map(|c| c.parse::<u64>().unwrap())
            .collect::<Vec<_>>();
        for (text, dt, groups) in [(&mut send, 4, 4), (&mut recv, 8, n)] {
            text.push_str(&format!(
                "# Raw counters\n\nNumber of ranks: {n}\nDatatype size: {dt}\nAlltoallv calls 0-{}\nCount: {} calls - {calls}\n\n\nBEGINNING DATA\n",
                blocks * 3 - 1,
                k[1] - k[0] + 1
            ));
            for g in 0..groups {
                let ranks: Vec<String> = (0..n)
                    .filter(|r| r % groups == g)
                    .map(|r| r.to_string())
                    .collect();
                text.push_str(&format!("Rank(s) {}: ", ranks.join(", ")));
                for _ in 0..n {
                    let c = if rnd(3) == 0 { rnd(900) } else { 0 };
                    text.push_str(&format!("{c} "));
                }
                text.push('\n');
            }
            text.push_str("END DATA\n");
        }
    }
    let (s, r) = (
        dir.join("send-counters.job0.rank0.txt"),
        dir.join("recv-counters.job0.rank0.txt"),
    );
    std::fs::write(&s, send).unwrap();
    std::fs::write(&r, recv).unwrap();
    (s, r)
}

/// Runs the offline analysis; its output files (reports by name, tables by
/// table name) and stderr, or the failure's stderr.
fn analyze(
    dir: &Path,
    out: &Path,
    threads: Option<&str>,
    env: Option<&str>,
) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let _ = std::fs::remove_dir_all(out);
    let mut c = Command::new(bin());
    c.args(["analyze", "counts"])
        .arg(dir)
        .arg("--out")
        .arg(out)
        .args(["--run-id", "01JD3Q6Z5YV9C2M4T8N0R7K1PX"])
        .env_remove("BENCHLAKE_COUNTS_THREADS");
    if let Some(t) = threads {
        c.args(["--threads", t]);
    }
    if let Some(t) = env {
        c.env("BENCHLAKE_COUNTS_THREADS", t);
    }
    let res = c.output().unwrap();
    if !res.status.success() {
        return Err(String::from_utf8_lossy(&res.stderr).into_owned());
    }
    let mut files = BTreeMap::new();
    collect(out, out, &mut files);
    Ok(files)
}

fn collect(root: &Path, dir: &Path, files: &mut BTreeMap<String, Vec<u8>>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            collect(root, &p, files);
            continue;
        }
        let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        // tables/<table>/year=…/month=…/part-<date>-<run>-<job>.parquet: by table.
        let key = if rel.starts_with("tables/") {
            rel.split('/').take(2).collect::<Vec<_>>().join("/")
        } else {
            rel
        };
        files.insert(key, std::fs::read(&p).unwrap());
    }
}

#[test]
fn reports_and_tables_are_the_same_bytes_on_any_number_of_threads() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("pair");
    std::fs::create_dir_all(&data).unwrap();
    // 256 ranks, 80 blocks: a 12 MB recv file, cut for 2 and 3 threads.
    let (_, recv) = write_pair(&data, 256, 80);
    assert!(std::fs::metadata(&recv).unwrap().len() > 10 << 20);
    let out = tmp.path().join("out");
    let one = analyze(&data, &out, Some("1"), None).unwrap();
    assert!(one.contains_key("reports/alltoallv_heat-map.rank0-send.md"));
    assert!(one.contains_key("reports/patterns-job0-rank0.md"));
    assert!(one.contains_key("tables/alltoallv_heatmap"));
    assert!(one.contains_key("tables/alltoallv_patterns"));
    let stats = String::from_utf8_lossy(&one["reports/stats-job0-rank0.md"]).into_owned();
    assert!(
        stats.starts_with("Total number of alltoallv calls: 240"),
        "{stats}"
    );
    for (threads, env) in [(Some("2"), None), (Some("3"), None), (None, Some("2"))] {
        let got = analyze(&data, &out, threads, env).unwrap();
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            one.keys().collect::<Vec<_>>()
        );
        for (name, bytes) in &one {
            assert!(
                got[name] == *bytes,
                "{name} differs with --threads {threads:?} / env {env:?}"
            );
        }
    }

    // A bad count in the last block: the same error, same line, on any number.
    let text = std::fs::read_to_string(&recv).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let row = lines.len() - 3;
    let bad = lines[row].replacen(": ", ": 12x", 1);
    let mut l = lines.clone();
    l[row] = &bad;
    std::fs::write(&recv, l.join("\n") + "\n").unwrap();
    let e1 = analyze(&data, &out, Some("1"), None).unwrap_err();
    assert!(
        e1.contains(&format!("line {}, column", row + 1)) && e1.contains("expected a count"),
        "{e1}"
    );
    for t in ["2", "3"] {
        let e = analyze(&data, &out, Some(t), None).unwrap_err();
        assert_eq!(e.lines().last(), e1.lines().last(), "--threads {t}");
    }
}

#[test]
fn the_profiler_case_is_the_same_on_one_and_two_threads() {
    let case =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/counts/a2av_cases_np4");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let one = analyze(&case, &out, Some("1"), None).unwrap();
    let two = analyze(&case, &out, Some("2"), None).unwrap();
    assert_eq!(one, two);
    // And what the Go tool wrote (same lines, its map orders vary).
    let reference = case.join("go_reference/srcountsanalyzer");
    let mut compared = 0;
    for e in std::fs::read_dir(&reference).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let mut want: Vec<String> = std::fs::read_to_string(&p)
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        let got = two
            .get(&format!("reports/{name}"))
            .unwrap_or_else(|| panic!("{name} not written"));
        let mut got: Vec<String> = String::from_utf8_lossy(got)
            .lines()
            .map(String::from)
            .collect();
        want.sort();
        got.sort();
        assert_eq!(got, want, "{name} differs from the Go reference");
        compared += 1;
    }
    assert!(compared >= 9, "{compared}");
}
