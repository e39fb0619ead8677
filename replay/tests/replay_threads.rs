//! A replay gives the same result, bit for bit, on 1 and on 2 threads (issue
//! 16): the 40 Dimemas reference cases, the Bandela reference case and a
//! Bandela halo, synthetic halo traces up to 1,024 ranks under platforms with
//! shared buses, links and nodes, and traces whose errors come in the middle
//! of a task's (or a rank file's) records.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use benchlake_replay::models::{BANDELA, DIMEMAS};
use benchlake_replay::{ReplayResult, synth::Halo};

fn data() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/replay"
    ))
}

/// Debug's float formatting is the shortest text that reads back to the same
/// bits (and tells -0.0 from 0.0): equal texts are bit-identical results.
fn bits(r: &ReplayResult) -> String {
    format!("{r:?}")
}

fn same_on_1_and_2_threads(trace: &Path, params: &BTreeMap<String, String>) -> ReplayResult {
    let one = DIMEMAS
        .replay_threads(trace, params, 1)
        .unwrap_or_else(|e| panic!("{}: {e}", trace.display()));
    let two = DIMEMAS
        .replay_threads(trace, params, 2)
        .unwrap_or_else(|e| panic!("{}: {e}", trace.display()));
    assert_eq!(one, two, "{} {params:?}", trace.display());
    assert_eq!(bits(&one), bits(&two), "{} {params:?}", trace.display());
    one
}

fn p(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn the_40_dimemas_reference_cases_are_identical_on_1_and_2_threads() {
    let dir = data().join("dimemas");
    let text = std::fs::read_to_string(dir.join("reference.json")).expect("reference.json");
    let reference: serde_json::Value = serde_json::from_str(&text).expect("json");
    let results = reference["results"].as_array().expect("results");
    assert_eq!(results.len(), 40);
    for case in results {
        let trace = case["trace"].as_str().expect("trace");
        let config = case["config"].as_str().expect("config");
        let mut params = BTreeMap::new();
        params.insert(
            "config".to_string(),
            dir.join("configs")
                .join(format!("{config}.cfg"))
                .display()
                .to_string(),
        );
        let extra: Vec<&str> = case["extra_args"]
            .as_array()
            .map(|v| v.iter().filter_map(|x| x.as_str()).collect())
            .unwrap_or_default();
        if let Some(i) = extra.iter().position(|a| *a == "-S") {
            params.insert(
                "eager_limit".to_string(),
                extra.get(i + 1).copied().unwrap_or("").to_string(),
            );
        }
        let path = dir.join("traces").join(format!("{trace}.dim"));
        let r = same_on_1_and_2_threads(&path, &params);
        let exp = case["execution_time_s"].as_f64().expect("exec");
        assert!(
            (r.predicted_time_s - exp).abs() <= 2e-9,
            "{trace}/{config}: {} vs {exp}",
            r.predicted_time_s
        );
    }
}

#[test]
fn synthetic_halos_up_to_1024_ranks_are_identical_on_1_and_2_threads() {
    let d = tempfile::tempdir().expect("tmp");
    // (ranks, iterations): many chunks per task (1,400 records for 64 ranks),
    // and 1,024 ranks, the size of the speed runs.
    for (ranks, iters) in [(2, 3), (64, 200), (1024, 12)] {
        let path = d.path().join(format!("halo_{ranks}_{iters}.dim"));
        let n = Halo::new(ranks, iters).write_dim(&path).expect("synth");
        for params in [
            p(&[]),
            // One bus for the machine and 2 links per node: transfers queue.
            p(&[("buses", "1"), ("links", "2")]),
            // 4 ranks per node (intra-node links and buses), rendezvous
            // above 4 KB, a slower CPU and LIN collectives.
            p(&[
                ("tasks_per_node", "4"),
                ("nodes", "256"),
                ("intra_buses", "1"),
                ("eager_limit", "4K"),
                ("cpu_ratio", "0.5"),
                ("gop_model", "LIN"),
            ]),
        ] {
            let r = same_on_1_and_2_threads(&path, &params);
            assert_eq!(r.records, n, "{ranks}x{iters} {params:?}");
            assert_eq!(r.ranks.len(), ranks as usize);
            assert!(r.predicted_time_s > 0.0);
            assert!(r.ranks.iter().all(|k| !k.functions.is_empty()));
        }
    }
}

/// A bad record in the middle of a task's records stops the replay with the
/// same error (file, offset, field) on 1 and 2 threads, after the same work.
#[test]
fn errors_in_the_middle_of_a_trace_are_the_same_on_1_and_2_threads() {
    let d = tempfile::tempdir().expect("tmp");
    let path = d.path().join("halo.dim");
    Halo::new(8, 100).write_dim(&path).expect("synth");
    let text = std::fs::read_to_string(&path).expect("read");
    // Rank 5's 300th record gets a bad size; every other byte stays put, so
    // the offsets block still points at each task.
    let start = text.find("\n2:5:0:").expect("a send of rank 5") + 1;
    let mut lines_from = text.get(start..).expect("tail").lines();
    let mut at = start;
    for _ in 0..300 {
        at += lines_from.next().expect("line").len() + 1;
    }
    let line = text.get(at..).and_then(|t| t.lines().next()).expect("line");
    let bad_line = line.replacen(':', "x", 1);
    let bad = format!("{}{bad_line}{}", &text[..at], &text[at + line.len()..]);
    let bad_path = d.path().join("bad.dim");
    std::fs::write(&bad_path, &bad).expect("write");
    let e1 = DIMEMAS
        .replay_threads(&bad_path, &p(&[]), 1)
        .err()
        .map(|e| e.to_string())
        .expect("an error on 1 thread");
    let e2 = DIMEMAS
        .replay_threads(&bad_path, &p(&[]), 2)
        .err()
        .map(|e| e.to_string())
        .expect("an error on 2 threads");
    assert_eq!(e1, e2);
    let line_no = text[..at].matches('\n').count() + 1;
    assert!(
        e1.contains("bad.dim") && e1.contains(&format!("line {line_no},")),
        "{e1}"
    );

    // A trace cut in the middle of a line (no offsets block either).
    let cut_path = d.path().join("cut.dim");
    let cut = text.get(..text.len() / 2).expect("half");
    let cut = cut.replacen(
        &text[..text.find('\n').expect("header")],
        &text[..text.find('\n').expect("header")].replacen(":1,", ":0,", 1),
        1,
    );
    std::fs::write(&cut_path, cut.trim_end_matches('\n')).expect("write");
    let c1 = DIMEMAS.replay_threads(&cut_path, &p(&[]), 1);
    let c2 = DIMEMAS.replay_threads(&cut_path, &p(&[]), 2);
    let (c1, c2) = (
        c1.err().map(|e| e.to_string()).expect("cut, 1 thread"),
        c2.err().map(|e| e.to_string()).expect("cut, 2 threads"),
    );
    assert_eq!(c1, c2);
}

/// The seed's 4-rank broadcast inputs (`bandela_seed_bcast_check.json`, as
/// `replay_bandela.rs` builds them): the same result whether the rank files
/// are read on the event loop's thread or on a second one.
#[test]
fn the_bandela_seed_case_is_identical_on_1_and_2_threads() {
    let check: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(data().join("bandela_seed_bcast_check.json")).expect("json"),
    )
    .expect("parse");
    let payload = check["inputs_that_reproduce"]["payload_bytes"]
        .as_u64()
        .expect("payload");
    let d = tempfile::tempdir().expect("tmp");
    let sender = format!("K 0 MPI_Bcast isend 1 1 -3 {payload} 0 0\nK 1 MPI_Bcast wait 0\n");
    let root =
        format!("C 0.0193\nK 0 MPI_Bcast irecv 0 1 -3 {payload} 0 0\nK 1 MPI_Bcast wait 0\n");
    for (i, body) in [sender, root].iter().enumerate() {
        std::fs::write(
            d.path().join(format!("bandela.{i}.txt")),
            format!("H {i} 2 0\n{body}"),
        )
        .expect("write");
    }
    let input = d.path().join("input");
    std::fs::write(
        &input,
        "NUMBER_OF_HOSTS 1\nHOST_TYPE 0\nmpi_buffer_max 2048\nINTRA_HOST_BANDWIDTH_PEAK 800.00\nINTRA_HOST_LATENCY 2.0\nINTRA_HOST_BARRIER_LATENCY 10.00\nBLOCK_HOST 0\nNUMBER_OF_PROCS 2\nMPI_RANKS 0-1\nADAPTERS 0\n",
    )
    .expect("input");
    let params = p(&[("input", input.to_str().expect("utf-8 path"))]);
    let one = BANDELA
        .replay_threads(d.path(), &params, 1)
        .expect("1 thread");
    let two = BANDELA
        .replay_threads(d.path(), &params, 2)
        .expect("2 threads");
    assert_eq!(bits(&one), bits(&two));
    assert_eq!(one.ranks[1].bytes_received, payload);
    assert!(one.predicted_time_s > 0.0193);
}

/// The synthetic halo of `benchlake probe bandela`, replayed on one thread and
/// with the rank files decoded on a second one: the same result to the bit,
/// and every rank's latency, transfer and computation as the input gives them.
#[test]
fn halo_is_the_same_on_one_and_two_threads_and_costs_what_the_input_says() {
    use benchlake_replay::bandela::{rank_files, simulate_threads};
    let d = tempfile::tempdir().expect("tmp");
    let (ranks, iters) = (48u32, 30u32);
    let halo = Halo::new(ranks, iters);
    let records = halo.write_bandela(d.path()).expect("write");
    let input = benchlake_formats::bandela::BandelaInput::read(d.path().join("replaympi.input"))
        .expect("input");
    let files = rank_files(d.path()).expect("files");
    assert_eq!(files.len(), ranks as usize);
    let one = simulate_threads(&files, &input, None, false, 1).expect("1 thread");
    let two = simulate_threads(&files, &input, None, false, 2).expect("2 threads");
    assert_eq!(one.records, records);
    assert_eq!(two.records, records);
    assert_eq!(bits(&one), bits(&two));
    // Per iteration: 2 irecv + 2 isend at L = 2 µs and 4 waits at L(0) = 2 µs;
    // two 8,192-byte receives at 800 MB/s (10.24 µs each) and two buffered
    // copies at 2 × 800 MB/s (5.12 µs each); every 10th a 10 µs barrier.
    let it = f64::from(iters);
    for r in &one.ranks {
        let burst = 1e-4 * (1.0 + 0.1 * f64::from(r.rank % 7));
        let near = |x: f64, want: f64, what: &str| {
            assert!(
                (x - want).abs() < 1e-9,
                "rank {} {what}: {x} against {want}",
                r.rank
            );
        };
        near(r.comm.latency, it * 16e-6 + (it / 10.0) * 10e-6, "latency");
        near(r.comm.big, it * (2.0 * 10.24e-6 + 2.0 * 5.12e-6), "big");
        near(r.comm.small, 0.0, "small");
        near(r.computation_s, it * burst, "computation");
        assert_eq!(r.bytes_received, u64::from(iters) * 2 * 8192);
        assert_eq!(r.messages_sent, u64::from(iters) * 2);
        let names: Vec<&str> = r.functions.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            ["MPI_Allreduce", "MPI_Irecv", "MPI_Isend", "MPI_Waitall"]
        );
    }
    // The slowest ranks (t mod 7 = 6) set the pace: nobody ends before
    // their computation and communication.
    let slow = it * 1.6e-4 + it * (16e-6 + 30.72e-6) + (it / 10.0) * 10e-6;
    assert!(
        one.predicted_time_s >= slow - 1e-9,
        "{}",
        one.predicted_time_s
    );
}

/// A record broken in the middle of one rank's file stops the replay with the
/// same error (file, field, line) whether the files are decoded on the event
/// loop's thread or on two (where either thread may parse the broken chunk).
#[test]
fn a_broken_record_is_the_same_error_on_one_and_two_threads() {
    use benchlake_replay::bandela::{rank_files, simulate_threads};
    for rank in [16u32, 17] {
        let d = tempfile::tempdir().expect("tmp");
        Halo::new(40, 20).write_bandela(d.path()).expect("write");
        let file = format!("bandela.{rank}.txt");
        let broken = d.path().join(&file);
        let text = std::fs::read_to_string(&broken).expect("read");
        let mut lines: Vec<&str> = text.lines().collect();
        // Line 97 of the file: the 11th iteration's send to the next rank,
        // its peer made a word.
        let peer = format!(" isend {} ", rank + 1);
        assert!(lines[96].contains(&peer), "{}", lines[96]);
        let bad = lines[96].replacen(&peer, " isend eighteen ", 1);
        lines[96] = &bad;
        std::fs::write(&broken, lines.join("\n") + "\n").expect("write");
        let input =
            benchlake_formats::bandela::BandelaInput::read(d.path().join("replaympi.input"))
                .expect("input");
        let files = rank_files(d.path()).expect("files");
        let errs: Vec<String> = [1, 2]
            .into_iter()
            .map(|t| {
                simulate_threads(&files, &input, None, false, t)
                    .err()
                    .map(|e| e.to_string())
                    .unwrap_or_default()
            })
            .collect();
        assert_eq!(errs[0], errs[1]);
        assert!(errs[0].contains(&file), "{}", errs[0]);
        assert!(errs[0].contains("line 97"), "{}", errs[0]);
        assert!(errs[0].contains("isend.peer"), "{}", errs[0]);
    }
}
