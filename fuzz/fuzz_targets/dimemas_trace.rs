//! Fuzzes the `.dim` reader: open (header, definitions, offsets) and stream every task.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("benchlake-fuzz-dim-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("input.dim");
    if std::fs::write(&path, data).is_err() {
        return;
    }
    if let Ok(trace) = benchlake_formats::dimemas::DimTrace::open(&path) {
        for t in 0..trace.ntasks().min(64) as u32 {
            if let Ok(mut s) = trace.task_stream(t) {
                while let Ok(Some(_)) = s.next_record() {}
            }
        }
    }
});
