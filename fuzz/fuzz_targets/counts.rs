//! Fuzzes every alltoallv reader: compact (whole parse incl. rows), per-call,
//! timings, location, backtrace and comm-data files, and the rank-list grammar.
#![no_main]
use std::io::Cursor;
use std::path::Path;

use benchlake_formats::counts::compact::{CompactReader, Row};
use benchlake_formats::counts::lines::Lines;
use benchlake_formats::counts::{meta, percall, ranklist, timings};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let p = Path::new("fuzz");
    let _ = ranklist::parse(data);
    let _ = ranklist::parse_ordered(data);
    let mut r = CompactReader::new(Cursor::new(data), p);
    let mut row = Row::default();
    'outer: while let Ok(Some(_)) = r.next_block() {
        loop {
            match r.next_row(&mut row) {
                Ok(true) => {}
                Ok(false) => break,
                Err(_) => break 'outer,
            }
        }
    }
    let _ = percall::read(Cursor::new(data), p);
    let _ = timings::read(Cursor::new(data), p, |_, _, _| {});
    let _ = meta::read_locations_from(Lines::new(Cursor::new(data), p));
    let _ = meta::read_backtrace_from(Lines::new(Cursor::new(data), p));
    let _ = meta::read_comm_data_from(Lines::new(Cursor::new(data), p));
});
