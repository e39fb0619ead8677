//! Fuzzes the Bandela rank-trace reader (v1 and the manual's format_event
//! layout): open (header or first record) and stream every record, handing
//! each kernel's name back for reuse as the replay does.
#![no_main]
use benchlake_formats::bandela::{BRecord, RankTrace};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("benchlake-fuzz-bandela-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("bandela.0.txt");
    if std::fs::write(&path, data).is_err() {
        return;
    }
    if let Ok(mut t) = RankTrace::open(&path) {
        while let Ok(Some(r)) = t.next_record() {
            if let BRecord::Kernel { main_fn, .. } = r {
                t.reuse_name(main_fn);
            }
        }
    }
});
