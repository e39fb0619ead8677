use super::*;
use arrow::array::{Float64Array, Int32Array, StringArray};

fn timings(n: i32) -> RecordBatch {
    let schema = catalog::schema("linktest_timings").unwrap();
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(vec!["r"; n as usize])),
            Arc::new(StringArray::from(vec!["s"; n as usize])),
            Arc::new(Int32Array::from(vec![0; n as usize])),
            Arc::new(Int32Array::from((0..n).collect::<Vec<_>>())),
            Arc::new(Int32Array::from((0..n).map(|i| i + 1).collect::<Vec<_>>())),
            Arc::new(Int32Array::from(vec![1; n as usize])),
            Arc::new(Float64Array::from(vec![1e-6; n as usize])),
            Arc::new(StringArray::from(vec!["h0"; n as usize])),
            Arc::new(StringArray::from(vec![Some("h1"); n as usize])),
        ],
    )
    .unwrap()
}

/// Writes `t` into `lake` as one job's output; its key.
async fn land(lake: &Lake, t: &EncodedTable) -> Vec<String> {
    let (run, job) = ("01JBENCH000000000000000001", "01JBENCH000000000000000002");
    lake.write_final_encoded(std::slice::from_ref(t), "2026-11-24", run, job)
        .await
        .unwrap()
}

/// A spilled table is renamed into a local lake's final key (the same
/// bytes as encoded in memory) and read back; in an object store lake
/// it is read and put. Its temporary file does not outlive either.
#[tokio::test]
async fn spilled_tables_land_at_their_final_keys() {
    let dir = tempfile::tempdir().unwrap();
    let rows = BULK_ROWS as i32 + 5;
    let b = timings(rows);
    let want = encode_parquet("linktest_timings", "2026-11-22", std::slice::from_ref(&b)).unwrap();
    let spill = |lake_dir: &Path| {
        let mut enc = ParquetEncoder::new_in(
            "linktest_timings",
            "2026-11-22",
            rows as usize,
            0,
            Some(lake_dir),
        )
        .unwrap();
        enc.write_row_group(std::slice::from_ref(&b)).unwrap();
        enc.finish_table("").unwrap()
    };
    let local = dir.path().join("lake");
    let lake = Lake::local(&local).unwrap();
    let t = spill(&local);
    let tmp = t.spilled.as_ref().unwrap().path.to_path_buf();
    assert!(tmp.exists() && t.data.is_empty() && t.rows == rows as usize);
    let keys = land(&lake, &t).await;
    assert!(!tmp.exists(), "renamed into place");
    let got = std::fs::read(local.join(&keys[0])).unwrap();
    assert!(got == want, "the bytes differ");
    let back: usize = read_back(Bytes::from(got))
        .iter()
        .map(|b| b.num_rows())
        .sum();
    assert_eq!(back, rows as usize);
    // A lake that is not a local directory: the file is read and put.
    let other = Lake::from_store(Arc::new(object_store::memory::InMemory::new()), "memory://");
    let t = spill(dir.path());
    let keys = land(&other, &t).await;
    assert!(other.get(&keys[0]).await.unwrap() == want);
    let tmp = t.spilled.as_ref().unwrap().path.to_path_buf();
    drop(t);
    assert!(!tmp.exists());
    // Small tables are never spilled.
    let mut enc =
        ParquetEncoder::new_in("linktest_timings", "2026-11-22", 10, 0, Some(dir.path())).unwrap();
    enc.write_row_group(&[timings(10)]).unwrap();
    assert!(enc.finish_table("").unwrap().spilled.is_none());
}

#[tokio::test]
async fn offline_write_lands_at_final_keys_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::local(dir.path()).unwrap();
    let run = crate::ids::new_id();
    let job = crate::ids::new_id();
    let keys = lake
        .write_final(
            &[TableOutput::new("linktest_timings", vec![timings(5)])],
            "2026-11-22",
            &run,
            &job,
        )
        .await
        .unwrap();
    assert_eq!(keys.len(), 1);
    let data = lake.get(&keys[0]).await.unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(data)
        .unwrap()
        .build()
        .unwrap();
    let rows: usize = reader.map(|b| b.unwrap().num_rows()).sum();
    assert_eq!(rows, 5);
    assert_eq!(lake.list("tables/linktest_timings").await.unwrap().len(), 1);
}

/// Column `col` of `batches`, a non-null string column, as owned strings.
fn strings_of(batches: &[RecordBatch], col: usize) -> Vec<String> {
    use arrow::array::AsArray;
    batches
        .iter()
        .flat_map(|b| {
            b.column(col)
                .as_string::<i32>()
                .iter()
                .map(|v| v.unwrap().to_string())
        })
        .collect()
}

/// The batches of a file, without the `date` column every file ends with
/// (checked to be there: the date of the file, or day 0 of the tests that
/// pass days directly).
fn read_back(data: Bytes) -> Vec<RecordBatch> {
    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(data)
        .unwrap()
        .build()
        .unwrap()
        .map(|b| without_date(b.unwrap()))
        .collect()
}

/// `b` without its last column when that is a `date` (files carry it when
/// [`FILES_CARRY_DATE`], and the tests of `encode_with_schema` always).
fn without_date(b: RecordBatch) -> RecordBatch {
    use arrow::array::AsArray;
    let n = b.num_columns();
    let f = b.schema().field(n - 1).clone();
    if f.name() != catalog::DATE_COLUMN {
        return b;
    }
    let days = b
        .column(n - 1)
        .as_primitive::<arrow::datatypes::Date32Type>();
    assert_eq!(arrow::array::Array::null_count(days), 0);
    // One day per file.
    assert!(
        days.values().iter().all(|d| *d == days.value(0)),
        "{days:?}"
    );
    b.project(&(0..n - 1).collect::<Vec<_>>()).unwrap()
}

/// Every file ends with the `date` column: one value, as a constant chunk
/// whose statistics let readers skip row groups of other days.
#[test]
fn files_end_with_their_date() {
    use arrow::array::AsArray;
    let b = RecordBatch::try_new(
        catalog::schema("linktest_ranks").unwrap(),
        vec![
            Arc::new(StringArray::from(vec!["r"; 3])),
            Arc::new(StringArray::from(vec!["s"; 3])),
            Arc::new(Int32Array::from(vec![0, 1, 2])),
            Arc::new(StringArray::from(vec!["h0", "h0", "h1"])),
            Arc::new(Int32Array::from(vec![Some(7); 3])),
        ],
    )
    .unwrap();
    // From the public encoders ...
    let plain = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        encode_parquet("linktest_ranks", "2026-12-07", std::slice::from_ref(&b)).unwrap(),
    )
    .unwrap();
    assert_eq!(
        plain.schema().as_ref(),
        catalog::file_schema("linktest_ranks").unwrap().as_ref()
    );
    // ... and from the encoder with an explicit schema.
    let data = encode_with_schema(
        "linktest_ranks",
        catalog::schema("linktest_ranks").unwrap(),
        crate::layout::date_days("2026-12-07").unwrap(),
        &[b],
        false,
        chunks::PAGE_VALUES,
    )
    .unwrap();
    let all = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(data.clone())
        .unwrap()
        .build()
        .unwrap()
        .map(|b| b.unwrap())
        .collect::<Vec<_>>();
    let schema = all[0].schema();
    assert_eq!(
        schema.as_ref(),
        catalog::file_schema("linktest_ranks").unwrap().as_ref()
    );
    let days = all[0]
        .column_by_name("date")
        .unwrap()
        .as_primitive::<arrow::datatypes::Date32Type>();
    assert_eq!(
        days.values().to_vec(),
        vec![20794; 3],
        "2026-12-07 is day 20794"
    );
    let reader = parquet::file::serialized_reader::SerializedFileReader::new(data).unwrap();
    let meta = parquet::file::reader::FileReader::metadata(&reader).clone();
    let last = meta.row_group(0).columns().last().unwrap();
    assert_eq!(
        last.statistics(),
        Some(&parquet::file::statistics::Statistics::int32(
            Some(20794),
            Some(20794),
            None,
            Some(0),
            false
        ))
    );
    assert!(encode_parquet("linktest_ranks", "2026-13-07", &[]).is_err());
}

/// Host columns of one rank per host in a large table: values change
/// every row (bit-packed dictionary indices, 1 to 12 bits wide), or in
/// short runs; given as arrays or as keys, the same bytes, read back
/// exactly by arrow-rs.
#[test]
fn short_runs_of_large_tables_are_bit_packed_and_read_back() {
    let schema = catalog::schema("linktest_timings").unwrap();
    for (hosts, run) in [(2, 1), (3, 1), (1000, 1), (4096, 1), (700, 3), (50, 9)] {
        let n = BULK_ROWS + 1234;
        let names: Vec<String> = (0..hosts).map(|h| format!("nd{h:05}")).collect();
        // A pseudo-random walk over the hosts, `run` rows each.
        let key = |i: usize| ((i / run) * 7919 + (i / run) / 3) % hosts;
        let from: Vec<&str> = (0..n).map(|i| names[key(i)].as_str()).collect();
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(vec!["01JRUN"; n])),
                Arc::new(StringArray::from(vec!["raw/x.sion"; n])),
                Arc::new(Int32Array::from(vec![0; n])),
                Arc::new(Int32Array::from_iter_values(0..n as i32)),
                Arc::new(Int32Array::from_iter_values(0..n as i32)),
                Arc::new(Int32Array::from(vec![1; n])),
                Arc::new(Float64Array::from(vec![1e-6; n])),
                Arc::new(StringArray::from(from.clone())),
                Arc::new(StringArray::from(vec!["h"; n])),
            ],
        )
        .unwrap();
        let arrays =
            encode_parquet("linktest_timings", "2026-11-22", std::slice::from_ref(&b)).unwrap();
        let back = read_back(arrays.clone());
        assert_eq!(strings_of(&back, 7), from, "{hosts} hosts, runs of {run}");
        // The same column given as keys into the host names.
        let mut keys: Vec<(u32, usize)> = Vec::new();
        for i in 0..n {
            match keys.last_mut() {
                Some((k, m)) if *k as usize == key(i) => *m += 1,
                _ => keys.push((key(i) as u32, 1)),
            }
        }
        let mut enc = ParquetEncoder::new("linktest_timings", "2026-11-22", n, n).unwrap();
        let cut = |i: usize| -> Vec<arrow::array::ArrayRef> {
            let c = b.column(i);
            (0..n)
                .step_by(1 << 16)
                .map(|at| c.slice(at, (1 << 16).min(n - at)))
                .collect()
        };
        let values: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut cols: Vec<GroupColumn<'_>> = (0..7).map(|i| GroupColumn::Arrays(cut(i))).collect();
        cols.push(GroupColumn::Utf8Keys {
            values: values.clone(),
            keys: &keys,
        });
        cols.push(GroupColumn::Arrays(cut(8)));
        enc.write_row_group_columns(&mut cols).unwrap();
        drop(cols);
        let keyed = enc.finish().unwrap();
        assert_eq!(strings_of(&read_back(keyed), 7), from);
    }
}

/// `source` in runs (many files gathered into one table, a file's name
/// recurring later, runs crossing batches): the dictionary-and-RLE chunk
/// reads back the same strings, with min/max statistics over them and a
/// dictionary of the distinct values; a column whose values change too
/// often goes through arrow-rs and reads back the same too.
#[test]
fn string_columns_in_runs_read_back_identically() {
    use parquet::data_type::AsBytes;
    let schema = catalog::schema("linktest_timings").unwrap();
    let names = ["raw/b/file.sion", "raw/a/file.sion", "raw/c/file.sion"];
    let batch = |sources: Vec<&str>, hosts_like: bool| {
        let n = sources.len();
        let src: Vec<String> = if hosts_like {
            (0..n).map(|i| format!("h{}", i % 5)).collect()
        } else {
            sources.iter().map(|s| s.to_string()).collect()
        };
        RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(vec!["01JRUN"; n])),
                Arc::new(StringArray::from(src)),
                Arc::new(Int32Array::from(vec![0; n])),
                Arc::new(Int32Array::from_iter_values(0..n as i32)),
                Arc::new(Int32Array::from_iter_values(1..=n as i32)),
                Arc::new(Int32Array::from(vec![1; n])),
                Arc::new(Float64Array::from(vec![1e-6; n])),
                Arc::new(StringArray::from(vec!["h0"; n])),
                Arc::new(StringArray::from_iter_values(
                    (0..n).map(|i| format!("h{}", i / 3)),
                )),
            ],
        )
        .unwrap()
    };
    let runs = |lens: &[(usize, usize)]| -> Vec<&str> {
        lens.iter()
            .flat_map(|(k, n)| std::iter::repeat_n(names[*k], *n))
            .collect()
    };
    for hosts_like in [false, true] {
        let batches = vec![
            batch(runs(&[(0, 40), (1, 25)]), hosts_like),
            batch(runs(&[(1, 15), (2, 30), (0, 10)]), hosts_like),
        ];
        let data = encode_parquet("linktest_timings", "2026-11-22", &batches).unwrap();
        let back = read_back(data.clone());
        let got = strings_of(&back, 1);
        let want = strings_of(&batches, 1);
        assert_eq!(got, want, "hosts_like {hosts_like}");
        let meta = parquet::file::reader::FileReader::metadata(
            &parquet::file::serialized_reader::SerializedFileReader::new(data).unwrap(),
        )
        .clone();
        let c = meta.row_group(0).column(1);
        let Some(parquet::file::statistics::Statistics::ByteArray(st)) = c.statistics() else {
            panic!("no statistics: {c:?}")
        };
        let (lo, hi) = if hosts_like {
            ("h0", "h4")
        } else {
            ("raw/a/file.sion", "raw/c/file.sion")
        };
        assert_eq!(st.min_opt().unwrap().as_bytes(), lo.as_bytes());
        assert_eq!(st.max_opt().unwrap().as_bytes(), hi.as_bytes());
        assert_eq!(st.null_count_opt(), Some(0));
        if !hosts_like {
            // Three distinct names, a dictionary page and RLE runs: a few
            // dozen bytes for 120 rows.
            assert!(c.compressed_size() < 200, "{}", c.compressed_size());
        }
    }
    // Many distinct values in runs: an index wider than one byte.
    let many: Vec<String> = (0..2000)
        .flat_map(|i| vec![format!("f{i:05}"); 8])
        .collect();
    let b = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(vec!["01JRUN"; many.len()])),
            Arc::new(StringArray::from(many.clone())),
            Arc::new(Int32Array::from(vec![0; many.len()])),
            Arc::new(Int32Array::from_iter_values(0..many.len() as i32)),
            Arc::new(Int32Array::from_iter_values(0..many.len() as i32)),
            Arc::new(Int32Array::from(vec![1; many.len()])),
            Arc::new(Float64Array::from(vec![1e-6; many.len()])),
            Arc::new(StringArray::from(many.clone())),
            Arc::new(StringArray::from(vec!["h"; many.len()])),
        ],
    )
    .unwrap();
    let back = read_back(encode_parquet("linktest_timings", "2026-11-22", &[b]).unwrap());
    assert_eq!(strings_of(&back, 7), many);
    let got = strings_of(&back, 1);
    assert_eq!(got, many);
}

#[test]
fn bulk_tables_with_constant_columns_read_back_identically() {
    // Two row groups (the second partial), batches that straddle them, and
    // constant run_id/source/permutation columns (the hand-built path) next
    // to encoded ones.
    let n = ROW_GROUP_ROWS + 1000;
    let schema = catalog::schema("linktest_timings").unwrap();
    let mut batches = Vec::new();
    let mut at = 0;
    for len in [300_000, 600_000, n - 900_000] {
        let rows = at..at + len;
        batches.push(
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(StringArray::from(vec!["01JRUN"; len])),
                    Arc::new(StringArray::from(vec!["raw/x.sion"; len])),
                    Arc::new(Int32Array::from(vec![3; len])),
                    Arc::new(Int32Array::from_iter_values(
                        rows.clone().map(|i| (i / 4095) as i32),
                    )),
                    Arc::new(Int32Array::from_iter_values(
                        rows.clone().map(|i| (i % 4095) as i32),
                    )),
                    Arc::new(Int32Array::from_iter_values(
                        rows.clone().map(|i| (i * 7 % 4095) as i32),
                    )),
                    Arc::new(Float64Array::from_iter_values(
                        rows.clone().map(|i| f64::from((i as f32) * 1e-9)),
                    )),
                    Arc::new(StringArray::from_iter_values(
                        rows.clone().map(|i| format!("n{}", i / 4095 / 48)),
                    )),
                    Arc::new(StringArray::from_iter_values(
                        rows.map(|i| format!("n{}", i % 4095 / 48)),
                    )),
                ],
            )
            .unwrap(),
        );
        at += len;
    }
    let data = encode_parquet("linktest_timings", "2026-11-22", &batches).unwrap();
    let meta = parquet::file::reader::FileReader::metadata(
        &parquet::file::serialized_reader::SerializedFileReader::new(data.clone()).unwrap(),
    )
    .clone();
    assert_eq!(meta.num_row_groups(), 2);
    assert_eq!(meta.row_group(0).num_rows(), ROW_GROUP_ROWS as i64);
    // run_id is the one-entry dictionary chunk with exact statistics.
    let c0 = meta.row_group(0).column(0);
    assert!(c0.compressed_size() < 100, "{}", c0.compressed_size());
    let back = read_back(data);
    let want = arrow::compute::concat_batches(&schema, &batches).unwrap();
    let got = arrow::compute::concat_batches(&schema, &back).unwrap();
    assert_eq!(got, want);
}

#[test]
fn nullable_constant_and_small_tables_read_back_identically() {
    // linktest_runs has nullable Utf8 (git_hash) and Int64 columns; a few rows
    // go through the small-table path and still use the constant chunks.
    let schema = catalog::schema("linktest_ranks").unwrap();
    let b = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(vec!["r"; 5])),
            Arc::new(StringArray::from(vec!["s"; 5])),
            Arc::new(Int32Array::from(vec![0, 1, 2, 3, 4])),
            Arc::new(StringArray::from(vec!["h0", "h0", "h1", "h1", "h1"])),
            Arc::new(Int32Array::from(vec![Some(7); 5])),
        ],
    )
    .unwrap();
    let back = read_back(
        encode_parquet("linktest_ranks", "2026-11-22", std::slice::from_ref(&b)).unwrap(),
    );
    assert_eq!(back, vec![b]);
    let empty = encode_parquet("linktest_ranks", "2026-11-22", &[]).unwrap();
    assert!(read_back(empty).is_empty());
}

/// Int32, Int64 and Float64 columns, required and optional (without nulls),
/// through the hand-written numeric chunks.
fn numeric_batch(i32s: Vec<i32>, i64s: Vec<i64>, f64s: Vec<f64>) -> RecordBatch {
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    let schema = Arc::new(Schema::new(vec![
        Field::new("a", DataType::Int32, false),
        Field::new("b", DataType::Int64, true),
        Field::new("c", DataType::Float64, false),
        Field::new("d", DataType::Float64, true),
        Field::new("e", DataType::Int32, true),
    ]));
    let e: Vec<i32> = i32s.iter().rev().copied().collect();
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int32Array::from(i32s)),
            Arc::new(Int64Array::from(i64s)),
            Arc::new(Float64Array::from(f64s.clone())),
            Arc::new(Float64Array::from(
                f64s.into_iter().rev().collect::<Vec<_>>(),
            )),
            Arc::new(Int32Array::from(e)),
        ],
    )
    .unwrap()
}

/// Encodes `b` (split into batches at `cuts`) on the bulk path with
/// `page_values` values per page, reads it back with arrow-rs and checks
/// values (floats bit for bit) and chunk statistics.
fn numeric_round_trip(b: &RecordBatch, cuts: &[usize], page_values: usize) {
    use arrow::array::AsArray;
    use arrow::datatypes::{Float64Type, Int32Type, Int64Type};
    use parquet::file::statistics::Statistics;
    let mut batches = Vec::new();
    let mut at = 0;
    for c in cuts.iter().copied().chain([b.num_rows()]) {
        let c = c.clamp(at, b.num_rows());
        batches.push(b.slice(at, c - at));
        at = c;
    }
    let data =
        encode_with_schema("numeric_test", b.schema(), 0, &batches, true, page_values).unwrap();
    let reader = parquet::file::serialized_reader::SerializedFileReader::new(data.clone()).unwrap();
    let meta = parquet::file::reader::FileReader::metadata(&reader).clone();
    let back = read_back(data);
    let got = arrow::compute::concat_batches(&b.schema(), &back).unwrap();
    assert_eq!(got.num_rows(), b.num_rows());
    for col in [0, 4] {
        assert_eq!(
            got.column(col).as_primitive::<Int32Type>().values(),
            b.column(col).as_primitive::<Int32Type>().values(),
            "column {col}"
        );
    }
    assert_eq!(
        got.column(1).as_primitive::<Int64Type>().values(),
        b.column(1).as_primitive::<Int64Type>().values()
    );
    for col in [2, 3] {
        let bits = |a: &arrow::array::ArrayRef| -> Vec<u64> {
            a.as_primitive::<Float64Type>()
                .values()
                .iter()
                .map(|v| v.to_bits())
                .collect()
        };
        assert_eq!(bits(got.column(col)), bits(b.column(col)), "column {col}");
    }
    if b.num_rows() == 0 {
        return;
    }
    let rg = meta.row_group(0);
    // Every non-constant column chunk is the hand-written numeric one (no
    // dictionary page; constant integer chunks are a one-entry dictionary).
    for (i, c) in rg.columns().iter().take(b.num_columns()).enumerate() {
        let col = b.column(i);
        let constant = col.data_type().is_integer()
            && (1..col.len()).all(|r| {
                arrow::array::make_comparator(col, col, Default::default()).unwrap()(0, r).is_eq()
            });
        assert_eq!(
            c.dictionary_page_offset().is_some(),
            constant,
            "{:?}",
            c.column_path()
        );
    }
    let a = b.column(0).as_primitive::<Int32Type>().values();
    match rg.column(0).statistics() {
        Some(Statistics::Int32(s)) => {
            assert_eq!(s.min_opt(), a.iter().min());
            assert_eq!(s.max_opt(), a.iter().max());
            assert_eq!(s.null_count_opt(), Some(0));
        }
        other => panic!("statistics of a: {other:?}"),
    }
    let c = b.column(2).as_primitive::<Float64Type>().values();
    let finite: Vec<f64> = c.iter().copied().filter(|v| !v.is_nan()).collect();
    match rg.column(2).statistics() {
        Some(Statistics::Double(s)) if finite.is_empty() => {
            assert_eq!(s.min_opt(), None);
        }
        Some(Statistics::Double(s)) => {
            let lo = finite.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            assert_eq!(s.min_opt().copied(), Some(lo));
            assert_eq!(s.max_opt().copied(), Some(hi));
        }
        other => panic!("statistics of c: {other:?}"),
    }
}

#[test]
fn numeric_chunks_read_back_on_linktest_shapes() {
    // Runs, ascending sequences with a gap and a wrap, f32-widened times;
    // pages of 1,000 values so blocks, miniblocks and pages end unevenly.
    let n: usize = 4095 * 7 + 13;
    let from: Vec<i32> = (0..n).map(|i| (i / 4095) as i32).collect();
    let to: Vec<i64> = (0..n)
        .map(|i| (i % 4095) as i64 + i64::from(i % 4095 >= 3))
        .collect();
    let t: Vec<f64> = (0..n)
        .map(|i| f64::from((i as f32) * 1e-9 + 2e-6))
        .collect();
    let b = numeric_batch(from, to, t);
    numeric_round_trip(&b, &[100, 5000, 5001], 1000);
    numeric_round_trip(&b, &[], chunks::PAGE_VALUES);
}

#[test]
fn numeric_chunks_handle_extremes() {
    let i32s = vec![i32::MIN, i32::MAX, 0, -1, i32::MAX, i32::MIN, 1, 1, 1];
    let i64s = vec![i64::MIN, i64::MAX, 0, -1, i64::MAX, i64::MIN, 1, 1, 1];
    let f64s = vec![
        f64::NAN,
        -0.0,
        0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MIN_POSITIVE,
        f64::MAX,
        -f64::MAX,
        1.5,
    ];
    let b = numeric_batch(i32s, i64s, f64s);
    for page in [1, 2, 5, 100] {
        numeric_round_trip(&b, &[3], page);
    }
    // A zero maximum is written as +0.0, a zero minimum as -0.0.
    let b = numeric_batch(vec![0; 3], vec![0; 3], vec![0.0, -0.0, 0.0]);
    numeric_round_trip(&b, &[], 100);
    // Only NaNs: no min/max.
    let b = numeric_batch(vec![0; 2], vec![0; 2], vec![f64::NAN; 2]);
    numeric_round_trip(&b, &[], 100);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    #[test]
    fn numeric_chunks_round_trip(
        rows in proptest::collection::vec(
            (proptest::prelude::any::<i32>(), proptest::prelude::any::<i64>(),
             proptest::prelude::any::<f64>(), 0u8..4),
            1..700,
        ),
        cut in 0usize..700,
        page in 1usize..300,
    ) {
        // Mix full-range values with runs and small steps (bit widths 0..64).
        let mut prev = (0i32, 0i64);
        let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
        for (x, y, z, mode) in rows {
            let v = match mode {
                0 => (x, y),
                1 => prev,
                2 => (prev.0.wrapping_add(x % 5), prev.1.wrapping_add(y % 1000)),
                _ => (x >> 20, y >> 40),
            };
            prev = v;
            a.push(v.0);
            b.push(v.1);
            c.push(z);
        }
        numeric_round_trip(&numeric_batch(a, b, c), &[cut], page);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(96))]
    /// String columns of any run structure (runs of 1 to 60, values that
    /// recur, empty and multi-byte strings, up to 600 distinct values),
    /// cut into batches anywhere, non-null and nullable (with nulls or
    /// without), read back as written, with min/max statistics equal to
    /// the column's: the run-length chunk where it applies, arrow-rs
    /// where not.
    #[test]
    fn string_columns_round_trip(
        pool in proptest::collection::vec("\\PC{0,24}", 1..600),
        runs in proptest::collection::vec((0usize..600, 1usize..60, 0u8..10), 1..120),
        cut in 0usize..4000,
    ) {
        use arrow::array::{Array, AsArray};
        use arrow::datatypes::{DataType, Field, Schema};
        use parquet::data_type::AsBytes;
        let mut plain: Vec<String> = Vec::new();
        let mut nullable: Vec<Option<String>> = Vec::new();
        for (k, n, null) in &runs {
            let v = &pool[k % pool.len()];
            for _ in 0..*n {
                plain.push(v.clone());
                nullable.push((*null != 0).then(|| v.clone()));
            }
        }
        let schema = Arc::new(Schema::new(vec![
            Field::new("s", DataType::Utf8, false),
            Field::new("t", DataType::Utf8, true),
            Field::new("u", DataType::Utf8, true),
        ]));
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(plain.clone())),
                Arc::new(StringArray::from(nullable.clone())),
                Arc::new(StringArray::from(plain.iter().map(|x| Some(x.as_str())).collect::<Vec<_>>())),
            ],
        )
        .unwrap();
        let cut = cut.min(b.num_rows());
        let batches = [b.slice(0, cut), b.slice(cut, b.num_rows() - cut)];
        let data = encode_with_schema("strings_test", schema.clone(), 0, &batches, false, 1 << 17).unwrap();
        let meta = parquet::file::reader::FileReader::metadata(
            &parquet::file::serialized_reader::SerializedFileReader::new(data.clone()).unwrap(),
        )
        .clone();
        let got = arrow::compute::concat_batches(&schema, &read_back(data)).unwrap();
        proptest::prop_assert_eq!(got.num_rows(), plain.len());
        for col in [0, 2] {
            let c = got.column(col).as_string::<i32>();
            proptest::prop_assert_eq!(c.null_count(), 0);
            let back: Vec<&str> = (0..c.len()).map(|i| c.value(i)).collect();
            proptest::prop_assert_eq!(&back, &plain.iter().map(String::as_str).collect::<Vec<_>>());
        }
        let t = got.column(1).as_string::<i32>();
        let back: Vec<Option<&str>> = (0..t.len()).map(|i| t.is_valid(i).then(|| t.value(i))).collect();
        proptest::prop_assert_eq!(&back, &nullable.iter().map(|x| x.as_deref()).collect::<Vec<_>>());
        let (lo, hi) = (plain.iter().min().unwrap(), plain.iter().max().unwrap());
        for col in [0, 2] {
            let c = meta.row_group(0).column(col);
            let Some(parquet::file::statistics::Statistics::ByteArray(st)) = c.statistics() else {
                panic!("column {col}: no statistics")
            };
            proptest::prop_assert_eq!(st.min_opt().unwrap().as_bytes(), lo.as_bytes());
            proptest::prop_assert_eq!(st.max_opt().unwrap().as_bytes(), hi.as_bytes());
        }
    }
}

/// Float64 columns given as pages built value by value
/// ([`FloatPages`], pushed in uneven pieces, as `f64`s or as little-endian
/// bytes) are the bytes the same values make through the batches, required
/// and optional, one page or many, with NaN, -0.0 and infinities; a small
/// table or a column of another type refuses them.
#[test]
fn float_pages_columns_are_the_bytes_of_their_values() {
    let n = 5000;
    let mut x = 99u64;
    let f: Vec<f64> = (0..n)
        .map(|i| match i {
            7 => f64::NAN,
            8 => -0.0,
            900 => f64::INFINITY,
            4001 => f64::NEG_INFINITY,
            _ => {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                1e-6 + (x % 100_000) as f64 * 1e-11
            }
        })
        .collect();
    let b = numeric_batch((0..n as i32).collect(), (0..n as i64).collect(), f.clone());
    let rev: Vec<f64> = f.iter().rev().copied().collect();
    for page in [256, 1 << 17] {
        let mut enc =
            ParquetEncoder::with_schema("numeric_test", b.schema(), 0, true, page, n).unwrap();
        enc.write_row_group(std::slice::from_ref(&b)).unwrap();
        let want = enc.finish().unwrap();
        let pieces = |values: &[f64], optional: bool| {
            let mut p = FloatPages::new(page, optional);
            let mut at = 0;
            for (k, len) in [1usize, 15, 16, 17, 255, 256, 257, 1000]
                .iter()
                .cycle()
                .enumerate()
            {
                let end = (at + len).min(values.len());
                if k % 2 == 0 {
                    p.push(&values[at..end]).unwrap();
                } else {
                    let raw: Vec<u8> = values[at..end]
                        .iter()
                        .flat_map(|v| v.to_le_bytes())
                        .collect();
                    p.push_le(&raw).unwrap();
                }
                at = end;
                if at == values.len() {
                    break;
                }
            }
            assert_eq!(p.len(), values.len());
            p
        };
        let (mut c, mut d) = (pieces(&f, false), pieces(&rev, true));
        let mut enc =
            ParquetEncoder::with_schema("numeric_test", b.schema(), 0, true, page, n).unwrap();
        enc.write_row_group_columns(&mut [
            GroupColumn::Arrays(vec![b.column(0).clone()]),
            GroupColumn::Arrays(vec![b.column(1).clone()]),
            GroupColumn::Float64Pages(&mut c),
            GroupColumn::Float64Pages(&mut d),
            GroupColumn::Arrays(vec![b.column(4).clone()]),
        ])
        .unwrap();
        assert!(c.is_empty() && d.is_empty(), "the pages were taken");
        let got = enc.finish().unwrap();
        assert!(got == want, "pages of {page}: the bytes differ");
        // Both went through FloatPages: the values read back by arrow-rs
        // are the check that the pages are right.
        let back = read_back(got);
        let back = arrow::compute::concat_batches(&b.schema(), &back).unwrap();
        for (col, values) in [(2, &f), (3, &rev)] {
            let bits: Vec<u64> = back
                .column(col)
                .as_any()
                .downcast_ref::<Float64Array>()
                .unwrap()
                .values()
                .iter()
                .map(|v| v.to_bits())
                .collect();
            let want: Vec<u64> = values.iter().map(|v| v.to_bits()).collect();
            assert_eq!(bits, want, "pages of {page}, column {col}");
        }
    }
    // Not whole values, another type, or a small table: refused.
    assert!(FloatPages::new(256, false).push_le(&[0; 12]).is_err());
    let small = numeric_batch(vec![1, 2], vec![1, 2], vec![1.0, 2.0]);
    for (bulk, col, want) in [
        (true, 1, "column b as Float64 pages for Int64"),
        (
            false,
            2,
            "column c as Float64 pages for Float64 in a small table",
        ),
    ] {
        let mut enc =
            ParquetEncoder::with_schema("numeric_test", small.schema(), 0, bulk, 256, 2).unwrap();
        let mut p = FloatPages::new(256, false);
        p.push(&[1.0, 2.0]).unwrap();
        let mut cols: Vec<GroupColumn<'_>> = (0..5)
            .map(|i| GroupColumn::Arrays(vec![small.column(i).clone()]))
            .collect();
        cols[col] = GroupColumn::Float64Pages(&mut p);
        let e = enc.write_row_group_columns(&mut cols).unwrap_err();
        assert!(e.to_string().contains(want), "{e}");
    }
}

#[test]
fn wrong_schema_is_refused() {
    let b = timings(2);
    let e = encode_parquet("linktest_ranks", "2026-11-22", &[b]).unwrap_err();
    assert!(e.to_string().contains("linktest_ranks"), "{e}");
}

/// Int32 columns given as runs are written as the same bytes as their
/// values: bulk (hand-written delta pages, several pages per chunk) and
/// small tables (arrow-rs), required and optional, constant columns.
#[test]
fn int_runs_columns_are_the_bytes_of_their_values() {
    use arrow::array::{Array, ArrayRef};
    let encode_both = |a: &IntRuns, e: &IntRuns, bulk: bool, page: usize| {
        let va = a.to_array().values().to_vec();
        let n = va.len();
        let b = numeric_batch(
            va,
            (0..n as i64).map(|i| i * 7 - 3).collect(),
            (0..n).map(|i| i as f64 * 1e-6).collect(),
        );
        let b = RecordBatch::try_new(b.schema(), {
            let mut c: Vec<ArrayRef> = b.columns().to_vec();
            c[4] = Arc::new(e.to_array());
            c
        })
        .unwrap();
        let mut enc =
            ParquetEncoder::with_schema("numeric_test", b.schema(), 0, bulk, page, n).unwrap();
        enc.write_row_group(std::slice::from_ref(&b)).unwrap();
        let want = enc.finish().unwrap();
        let mut enc =
            ParquetEncoder::with_schema("numeric_test", b.schema(), 0, bulk, page, n).unwrap();
        enc.write_row_group_columns(&mut [
            GroupColumn::Int32Runs(a),
            GroupColumn::Arrays(vec![b.column(1).clone()]),
            GroupColumn::Arrays(vec![
                b.column(2).slice(0, 10),
                b.column(2).slice(10, n - 10),
            ]),
            GroupColumn::Arrays(vec![b.column(3).clone()]),
            GroupColumn::Int32Runs(e),
        ])
        .unwrap();
        let got = enc.finish().unwrap();
        assert!(
            got == want,
            "bulk {bulk}, pages of {page}: the bytes differ"
        );
        read_back(want)
    };
    // Sender and partner ranks of 70 ranks (runs), a pseudo-random
    // column (one value at a time), a constant one, wrapping values.
    let (mut from, mut to, mut noise, mut constant) = (
        IntRuns::new(),
        IntRuns::new(),
        IntRuns::new(),
        IntRuns::new(),
    );
    let mut x = 12345u32;
    for r in 0..70 {
        from.push_run(r, 69, 0);
        to.push_run(0, r as usize, 1);
        to.push_run(r + 1, 69 - r as usize, 1);
        constant.push_run(4, 69, 0);
        for _ in 0..69 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            noise.push((x % 5000) as i32 - (if x.is_multiple_of(7) { i32::MAX } else { 0 }));
        }
    }
    for bulk in [true, false] {
        for page in [256, 1 << 17] {
            let back = encode_both(&from, &to, bulk, page);
            let got = arrow::compute::concat_batches(&back[0].schema(), &back).unwrap();
            assert_eq!(got.num_rows(), 70 * 69);
            assert_eq!(
                got.column(4).as_any().downcast_ref::<Int32Array>().unwrap(),
                &to.to_array()
            );
            encode_both(&noise, &constant, bulk, page);
            encode_both(&constant, &from, bulk, page);
        }
    }
    // A column of the wrong type or length is refused.
    let b = numeric_batch(vec![1, 2], vec![1, 2], vec![1.0, 2.0]);
    let mut enc = ParquetEncoder::with_schema("numeric_test", b.schema(), 0, true, 256, 2).unwrap();
    let mut one = IntRuns::new();
    one.push(1);
    let e = enc
        .write_row_group_columns(&mut [
            GroupColumn::Int32Runs(&one),
            GroupColumn::Arrays(vec![b.column(1).clone()]),
            GroupColumn::Arrays(vec![b.column(2).clone()]),
            GroupColumn::Arrays(vec![b.column(3).clone()]),
            GroupColumn::Arrays(vec![b.column(4).clone()]),
        ])
        .unwrap_err();
    assert!(
        e.to_string().contains("column b has 2 rows, the others 1"),
        "{e}"
    );
    let e = enc
        .write_row_group_columns(&mut [
            GroupColumn::Arrays(vec![b.column(0).clone()]),
            GroupColumn::Int32Runs(&one),
            GroupColumn::Arrays(vec![b.column(2).clone()]),
            GroupColumn::Arrays(vec![b.column(3).clone()]),
            GroupColumn::Arrays(vec![b.column(4).clone()]),
        ])
        .unwrap_err();
    assert!(
        e.to_string().contains("column b as Int32 runs for Int64"),
        "{e}"
    );
}

/// A `Utf8` column given as runs of values gets the bytes of arrays of
/// those values, in every shape the encoder tells apart: one value (also
/// split over runs), runs of file names (one recurring), runs too short
/// for a runs chunk and more distinct values than it takes (arrow-rs's
/// writer, cut like the other columns), nullable or not, small or large
/// tables.
#[test]
fn utf8_runs_columns_are_the_bytes_of_their_values() {
    use arrow::array::{Array, ArrayRef};
    use arrow::datatypes::{DataType, Field, Schema};
    let schema = Arc::new(Schema::new(vec![
        Field::new("s", DataType::Utf8, false),
        Field::new("t", DataType::Utf8, true),
        Field::new("v", DataType::Int32, false),
    ]));
    let both = |runs: &[(&str, usize)], bulk: bool, cuts: &[usize]| {
        let n: usize = runs.iter().map(|r| r.1).sum();
        assert_eq!(cuts.iter().sum::<usize>(), n);
        let values: Vec<&str> = runs
            .iter()
            .flat_map(|(v, k)| std::iter::repeat_n(*v, *k))
            .collect();
        let s: ArrayRef = Arc::new(StringArray::from(values.clone()));
        let t: ArrayRef = Arc::new(StringArray::from(
            values.iter().map(|v| Some(*v)).collect::<Vec<_>>(),
        ));
        let v: ArrayRef = Arc::new(Int32Array::from_iter_values((0..n as i32).map(|i| i * 3)));
        let mut at = 0;
        let pieces: Vec<(usize, usize)> = cuts
            .iter()
            .map(|&k| {
                at += k;
                (at - k, k)
            })
            .collect();
        let batches: Vec<RecordBatch> = pieces
            .iter()
            .map(|&(a, k)| {
                RecordBatch::try_new(
                    schema.clone(),
                    vec![s.slice(a, k), t.slice(a, k), v.slice(a, k)],
                )
                .unwrap()
            })
            .collect();
        let mut enc =
            ParquetEncoder::with_schema("runs_test", schema.clone(), 0, bulk, 256, n).unwrap();
        enc.write_row_group(&batches).unwrap();
        let want = enc.finish().unwrap();
        let mut enc =
            ParquetEncoder::with_schema("runs_test", schema.clone(), 0, bulk, 256, n).unwrap();
        enc.write_row_group_columns(&mut [
            GroupColumn::Utf8Runs(runs.to_vec()),
            GroupColumn::Utf8Runs(runs.to_vec()),
            GroupColumn::Arrays(pieces.iter().map(|&(a, k)| v.slice(a, k)).collect()),
        ])
        .unwrap();
        let got = enc.finish().unwrap();
        assert!(
            got == want,
            "{} runs, bulk {bulk}: the bytes differ",
            runs.len()
        );
        let back = read_back(got);
        let back = arrow::compute::concat_batches(&schema, &back).unwrap();
        assert_eq!(back.column(0).as_ref(), s.as_ref());
        assert_eq!(back.column(1).as_ref(), t.as_ref());
    };
    let names: Vec<String> = (0..5000)
        .map(|i| format!("/data/r{i:04}/pingpong.sion"))
        .collect();
    for bulk in [false, true] {
        // One value, whole or in runs (an empty run among them), and "".
        both(&[("01JBENCH000000000000000001", 100)], bulk, &[100]);
        both(&[("a", 10), ("a", 0), ("a", 90)], bulk, &[40, 60]);
        both(&[("", 30)], bulk, &[30]);
        // Runs of file names, one recurring, runs crossing the cuts.
        let mut runs: Vec<(&str, usize)> = names[..50].iter().map(|n| (n.as_str(), 20)).collect();
        runs.push((names[3].as_str(), 9));
        both(&runs, bulk, &[333, 333, 343]);
        // Adjacent runs of one value are one run.
        let split = [
            (names[0].as_str(), 20),
            (names[0].as_str(), 20),
            (names[1].as_str(), 40),
        ];
        both(&split, bulk, &[80]);
        // Runs of 2 rows: no runs chunk, arrow-rs's writer.
        let short: Vec<(&str, usize)> = names[..100].iter().map(|n| (n.as_str(), 2)).collect();
        both(&short, bulk, &[37, 63, 100]);
    }
    // More distinct values than a runs chunk takes (8 rows each).
    let many: Vec<(&str, usize)> = names[..4097].iter().map(|n| (n.as_str(), 8)).collect();
    both(&many, true, &[32776]);
    // A runs column of the wrong type or length is refused.
    let mut enc =
        ParquetEncoder::with_schema("runs_test", schema.clone(), 0, true, 256, 2).unwrap();
    let v: ArrayRef = Arc::new(Int32Array::from(vec![1, 2]));
    let e = enc
        .write_row_group_columns(&mut [
            GroupColumn::Utf8Runs(vec![("x", 2)]),
            GroupColumn::Utf8Runs(vec![("x", 1)]),
            GroupColumn::Arrays(vec![v.clone()]),
        ])
        .unwrap_err();
    assert!(
        e.to_string().contains("column t has 1 rows, the others 2"),
        "{e}"
    );
    let e = enc
        .write_row_group_columns(&mut [
            GroupColumn::Utf8Runs(vec![("x", 2)]),
            GroupColumn::Utf8Runs(vec![("x", 2)]),
            GroupColumn::Utf8Runs(vec![("x", 2)]),
        ])
        .unwrap_err();
    assert!(
        e.to_string().contains("column v as Utf8 runs for Int32"),
        "{e}"
    );
    assert_eq!(v.len(), 2);
}
