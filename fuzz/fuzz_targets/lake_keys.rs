//! Lake keys (core/src/layout.rs): table files of both layouts, merged
//! files, raw, staging and work keys parse without panicking, and every key
//! accepted as a table file is the key its parts build again. A merged
//! file's footer (`benchlake.compacted`, JSON) decodes or is refused.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    use benchlake_core::layout;
    let _ = serde_json::from_slice::<benchlake_core::lake::compact::CompactedMeta>(data);
    let Ok(key) = std::str::from_utf8(data) else {
        return;
    };
    match layout::parse_table_file(key) {
        Some(layout::TableFile::Part(k)) => {
            let again = layout::table_key(k.table, k.date, k.run_id, k.job_id, k.part).unwrap();
            assert_eq!(again, key);
            assert!(key.starts_with(&layout::month_table_prefix(k.table, k.date).unwrap()));
        }
        Some(layout::TableFile::Compacted { table, first_date, id }) => {
            assert_eq!(layout::compacted_key(table, first_date, id).unwrap(), key);
        }
        None => {}
    }
    if let Some(k) = layout::parse_legacy_table_key(key) {
        assert!(layout::parse_table_key(key).is_none());
        assert!(benchlake_core::lake::migrate::new_key_of(&k).is_ok());
    }
    let _ = layout::parse_raw_key(key);
    let _ = layout::parse_raw_run(key);
    let _ = layout::parse_staging_key(key);
    let _ = layout::parse_work_key(key);
    let _ = layout::parse_calibration_key(key);
});
