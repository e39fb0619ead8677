//! Unit tests of the Bandela replay engine.
#[test]
fn rank_buffers_shrink_past_256_ranks_and_stop_at_4_kib() {
    use super::rank_buffer;
    assert_eq!(rank_buffer(0), 16 << 10);
    assert_eq!(rank_buffer(8), 16 << 10);
    assert_eq!(rank_buffer(256), 16 << 10);
    assert_eq!(rank_buffer(512), 8 << 10);
    assert_eq!(rank_buffer(1024), 4 << 10);
    assert_eq!(rank_buffer(65536), 4 << 10);
}

use super::*;
use crate::synth::Halo;

fn open(files: &[PathBuf]) -> RankFiles {
    RankFiles {
        ranks: files
            .iter()
            .map(|f| (Some(RankTrace::open(f).expect("open")), None, false))
            .collect(),
        routines: Routines::new(Names::default()),
    }
}

/// Rank `t`'s records from `dec`, 7 at a time, until its stream ends or
/// errs, at most `chunks` fills.
fn read(dec: &mut RankFiles, t: usize, chunks: usize, out: &mut Vec<(Rec, u64)>) -> Option<String> {
    for _ in 0..chunks {
        if dec.is_done(t) {
            break;
        }
        if let Err(e) = dec.fill(t, out, 7) {
            return Some(e.to_string());
        }
    }
    None
}

/// A rank's reader handed from one decoder to another between two
/// chunks (as between the two threads' contexts) reads on where it
/// stopped: the records, their lines and the error further on
/// are those of one decoder reading the file alone, and the decoder that
/// gave the rank away has nothing more of it.
#[test]
fn a_rank_handed_over_mid_file_reads_on_where_it_stopped() {
    let d = tempfile::tempdir().expect("tmp");
    Halo::new(4, 12).write_bandela(d.path()).expect("write");
    let broken = d.path().join("bandela.2.txt");
    let text = std::fs::read_to_string(&broken).expect("read");
    let mut lines: Vec<&str> = text.lines().collect();
    assert!(lines[60].starts_with("K "), "{}", lines[60]);
    // Its `ord` made a word.
    let bad = lines[60].replacen("K ", "K x", 1);
    lines[60] = &bad;
    std::fs::write(&broken, lines.join("\n") + "\n").expect("write");
    let files = rank_files(d.path()).expect("files");

    let mut alone = open(&files);
    let mut want = Vec::new();
    let want_err = read(&mut alone, 2, usize::MAX, &mut want);
    assert!(want.len() > 40, "{}", want.len());
    let want_err = want_err.expect("the broken line errs");
    assert!(want_err.contains("line 61"), "{want_err}");
    assert!(want_err.contains("K.ord"), "{want_err}");

    // Handed over after 3 fills (21 records), and once the error has been
    // met behind the last good record, so that it is pending then.
    for fills in [3usize, 0] {
        let mut thread = open(&files);
        let mut got = Vec::new();
        let err = if fills > 0 {
            read(&mut thread, 2, fills, &mut got)
        } else {
            // Read up to the record before the broken line: the error is
            // met by the fill that returns those records, and kept.
            while got.len() + 1 < want.len() {
                thread
                    .fill(2, &mut got, 1)
                    .expect("records before the error");
            }
            thread.fill(2, &mut got, 7).expect("the last record first");
            assert_eq!(got.len(), want.len());
            assert!(!thread.is_done(2), "the error is still to come");
            None
        };
        assert!(err.is_none());
        let mut looped = thread.split_off(&vec![false; files.len()]).expect("split");
        let task = thread.take_task(2).expect("rank 2");
        looped.put_task(2, task);
        assert!(thread.is_done(2));
        let mut after = Vec::new();
        thread.fill(2, &mut after, 7).expect("nothing left");
        assert!(after.is_empty());
        let err = read(&mut looped, 2, usize::MAX, &mut got);
        assert_eq!(got, want, "handed over after {fills} fills");
        assert_eq!(err.as_deref(), Some(want_err.as_str()));
        assert!(looped.is_done(2));
    }
}
