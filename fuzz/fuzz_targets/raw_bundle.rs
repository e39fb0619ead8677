//! Raw bundles (`raw/{run_id}/bundle.tar.zst`, core/src/lake/bundle.rs):
//! never panic; a refusal names the bundle and a byte offset; an accepted
//! bundle's members are raw outputs of its run, named once, within the
//! limits.
#![no_main]
use libfuzzer_sys::fuzz_target;

const KEY: &str = "raw/01JD3Q6Z5YV9C2M4T8N0R7K1PX/bundle.tar.zst";

fuzz_target!(|data: &[u8]| {
    use benchlake_core::lake::bundle;
    let mut names = std::collections::BTreeSet::new();
    match bundle::read(KEY, data, |k, d| {
        assert!(d.len() as u64 <= bundle::MAX_MEMBER_BYTES);
        assert!(names.insert(k.to_string()));
        Ok(())
    }) {
        Ok(members) => {
            assert!(!members.is_empty());
            for m in members {
                let (run, _, _) = benchlake_core::layout::parse_raw_key(&m.key).unwrap();
                assert_eq!(run, "01JD3Q6Z5YV9C2M4T8N0R7K1PX");
            }
        }
        Err(e) => assert!(e.to_string().starts_with(KEY), "{e}"),
    }
});
