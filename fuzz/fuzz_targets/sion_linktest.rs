//! Fuzzes the SION container reader and the LinkTest payload decoders.
//!
//! The first byte chooses the mode: even → the input is a whole SION file;
//! odd → the rest is cut into rank streams (lengths from the next bytes) and
//! wrapped in a valid container, so the payload decoders see deep inputs.
#![no_main]
use std::path::Path;

use benchlake_formats::linktest::{decode, inspect_set};
use benchlake_formats::sion::{SionSet, SionWriteOptions, TaskData, encode_sion_set};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let set = if mode % 2 == 0 {
        SionSet::from_bytes(Path::new("fuzz.sion"), vec![rest.to_vec()])
    } else {
        let ranks = usize::from(mode / 2 % 8) + 1;
        let mut streams = Vec::with_capacity(ranks);
        let mut at = rest;
        for r in 0..ranks {
            let take = if r + 1 == ranks {
                at.len()
            } else {
                let want = at.first().map(|b| usize::from(*b) * 4).unwrap_or(0);
                at = at.get(1..).unwrap_or_default();
                want.min(at.len())
            };
            let (s, tail) = at.split_at(take);
            streams.push(s);
            at = tail;
        }
        let tasks: Vec<TaskData<'_>> = streams.iter().map(|s| TaskData::single(s)).collect();
        match encode_sion_set(Path::new("fuzz.sion"), &tasks, &SionWriteOptions::default()) {
            Ok(files) => SionSet::from_bytes(Path::new("fuzz.sion"), files),
            Err(_) => return,
        }
    };
    if let Ok(set) = set {
        for t in set.tasks() {
            let _ = t.contiguous();
        }
        let _ = decode(&set);
        let _ = inspect_set(&set).to_text();
    }
});
