//! Column chunks the lake writes itself instead of going through arrow-rs's
//! column writer, for the shapes that dominate large tables (16.8 M rows of
//! `linktest_timings` for one 4,096-rank LinkTest run):
//!
//! - constant columns (`run_id`, `source`, `permutation`): a one-entry PLAIN
//!   dictionary page and one data page holding a single RLE run, a few dozen
//!   bytes in constant time ([`constant_chunk`]);
//! - non-null string columns whose values come in long runs (`source` when
//!   many files are gathered into one table): a PLAIN dictionary page of the
//!   distinct values and one data page of RLE runs of their indices
//!   ([`runs_chunk`]), in one pass comparing each value with the previous,
//!   or from the runs themselves when the caller has them
//!   ([`utf8_runs_chunk`], for `GroupColumn::Utf8Runs`);
//! - non-null `Int32`/`Int64` columns: `DELTA_BINARY_PACKED` pages, uncompressed
//!   (rank and step columns are runs or ascending sequences: most miniblocks
//!   have bit width 0 or 1) ([`numeric_chunk`]); an `Int32` column given as
//!   [`IntRuns`] gets the same pages, made a block at a time ([`runs_int_chunk`]);
//! - non-null `Float64` columns: `BYTE_STREAM_SPLIT` pages compressed with ZSTD
//!   (the exponent and high mantissa bytes of times compress well, the low
//!   ones are stored nearly as they are).
//!
//! arrow-rs's generic writer spent most of its time in per-value dispatch,
//! level bookkeeping and growing buffers for these columns. The pages written
//! here are standard v1 data pages with chunk statistics (min/max, null count)
//! and an offset index; no column index is written (readers prune by row group
//! only). Everything else (strings, nulls, other types) stays with arrow-rs.
use bytes::Bytes;
use parquet::basic::{Compression, Encoding, Type as PhysicalType, ZstdLevel};
use parquet::column::page::{CompressedPage, Page, PageWriter};
use parquet::column::writer::ColumnCloseResult;
use parquet::file::metadata::ColumnChunkMetaData;
use parquet::file::page_index::offset_index::{OffsetIndexMetaData, PageLocation};
use parquet::file::statistics::Statistics;
use parquet::file::writer::{SerializedPageWriter, TrackedWrite};
use parquet::schema::types::ColumnDescPtr;

use super::int_runs::{IntRuns, RunsCursor};
use crate::error::{Error, Result};

/// Values per data page of the numeric chunks: 1 MiB of `f64`, as arrow-rs's
/// default page size, and a multiple of the delta block size.
pub(super) const PAGE_VALUES: usize = 1 << 17;

/// ZSTD level of the float pages: level 1 is the fastest standard level; the
/// byte streams that matter (zeros, exponents) compress as well as at higher
/// levels. (Negative "fast" levels were measured: no faster on these pages
/// and 28 % larger files.)
const FLOAT_ZSTD_LEVEL: i32 = 1;

/// `DELTA_BINARY_PACKED` geometry: blocks of 128 values in 4 miniblocks of 32.
const BLOCK: usize = 128;
const MINIBLOCKS: usize = 4;
const MINI: usize = BLOCK / MINIBLOCKS;

/// The single value of a constant column.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum ConstValue {
    Utf8(Vec<u8>),
    Int32(i32),
    Int64(i64),
}

/// Remembers string buffers already proven constant: the constant columns of
/// large tables are slices of one repeated array, so the byte comparison runs
/// once per buffer and not once per row group.
#[derive(Default)]
pub(super) struct ConstantCache {
    /// (values buffer address, offsets address, rows verified, value)
    verified: Vec<(usize, usize, usize, Vec<u8>)>,
}

impl ConstantCache {
    /// The value when every array holds the same single non-null value.
    pub(super) fn constant(&mut self, cols: &[&arrow::array::ArrayRef]) -> Option<ConstValue> {
        let mut value: Option<ConstValue> = None;
        for c in cols {
            if c.is_empty() {
                continue;
            }
            if c.null_count() > 0 {
                return None;
            }
            let v = self.constant_one(c)?;
            match &value {
                Some(prev) if *prev != v => return None,
                _ => value = Some(v),
            }
        }
        value
    }

    fn constant_one(&mut self, c: &arrow::array::ArrayRef) -> Option<ConstValue> {
        use arrow::array::AsArray;
        use arrow::datatypes::{DataType, Int32Type, Int64Type};
        match c.data_type() {
            DataType::Int32 => {
                let v = c.as_primitive::<Int32Type>().values();
                let first = *v.first()?;
                all_equal(v, first).then_some(ConstValue::Int32(first))
            }
            DataType::Int64 => {
                let v = c.as_primitive::<Int64Type>().values();
                let first = *v.first()?;
                all_equal(v, first).then_some(ConstValue::Int64(first))
            }
            DataType::Utf8 => {
                let s = c.as_string::<i32>();
                let offsets = s.value_offsets();
                let values = s.values().as_slice();
                let rows = arrow::array::Array::len(s);
                let key = (values.as_ptr() as usize, offsets.as_ptr() as usize);
                for (vp, op, n, val) in &self.verified {
                    if (*vp, *op) == key && rows <= *n {
                        return Some(ConstValue::Utf8(val.clone()));
                    }
                }
                let (o0, o1) = (*offsets.first()?, *offsets.get(1)?);
                let w = o1.checked_sub(o0)?;
                // Every value has the same length...
                let same_len = offsets
                    .windows(2)
                    .fold(true, |ok, p| ok & (p[1].wrapping_sub(p[0]) == w));
                if !same_len {
                    return None;
                }
                let start = usize::try_from(o0).ok()?;
                let end = usize::try_from(*offsets.last()?).ok()?;
                let bytes = values.get(start..end)?;
                let w = usize::try_from(w).ok()?;
                // ... and the bytes repeat with period w.
                if w > 0 && bytes.get(w..)? != bytes.get(..bytes.len() - w)? {
                    return None;
                }
                let val = bytes.get(..w)?.to_vec();
                self.verified.push((key.0, key.1, rows, val.clone()));
                Some(ConstValue::Utf8(val))
            }
            _ => None,
        }
    }
}

/// True when every element equals `first` (branch-free inner loop, early exit
/// per block so non-constant columns cost little).
fn all_equal<T: Copy + PartialEq>(v: &[T], first: T) -> bool {
    v.chunks(4096)
        .all(|c| c.iter().fold(true, |ok, x| ok & (*x == first)))
}

/// ULEB128 varint.
fn push_varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// Zigzag varint of a signed value.
fn push_zigzag(out: &mut Vec<u8>, v: i64) {
    push_varint(out, ((v << 1) ^ (v >> 63)) as u64);
}

/// v1 definition levels of `rows` non-null values of an optional column: a u32
/// length, then one RLE run of 1s (bit width 1).
fn all_defined_levels(out: &mut Vec<u8>, rows: usize) {
    let mut levels = Vec::with_capacity(12);
    push_varint(&mut levels, (rows as u64) << 1);
    levels.push(1);
    out.extend_from_slice(&(levels.len() as u32).to_le_bytes());
    out.extend_from_slice(&levels);
}

/// One data page ready to be written: its body (compressed when the chunk is),
/// the body's uncompressed size and what the header says.
struct DataPage {
    body: Bytes,
    uncompressed: usize,
    values: usize,
    encoding: Encoding,
}

/// A dictionary page: its body (compressed when the chunk is), the body's
/// uncompressed size and its number of values.
struct DictPage {
    body: Vec<u8>,
    uncompressed: usize,
    entries: u32,
}

/// The chunk-level description shared by [`assemble`]'s callers.
struct ChunkSpec {
    codec: Compression,
    encodings: Vec<Encoding>,
    stats: Statistics,
    rows: usize,
}

/// Writes the (optional) dictionary page and the data pages of one column
/// chunk with page headers, and builds its metadata and offset index.
///
/// The chunk is written into `sink` (emptied first; pass a buffer back from
/// [`NumericScratch::recycle`] to reuse its memory).
fn assemble(
    descr: ColumnDescPtr,
    dict: Option<DictPage>,
    pages: Vec<DataPage>,
    spec: ChunkSpec,
    mut sink: Vec<u8>,
) -> Result<(Bytes, ColumnCloseResult)> {
    let body_bytes: usize = pages.iter().map(|p| p.body.len() + 64).sum();
    sink.clear();
    sink.reserve(body_bytes + 128);
    let mut sink = TrackedWrite::new(sink);
    let mut dict_offset = None;
    let mut first_data_offset = None;
    let mut uncompressed = 0i64;
    let mut locations = Vec::with_capacity(pages.len());
    {
        let mut writer = SerializedPageWriter::new(&mut sink);
        if let Some(dict) = dict {
            let s = writer.write_page(CompressedPage::new(
                Page::DictionaryPage {
                    buf: Bytes::from(dict.body),
                    num_values: dict.entries,
                    encoding: Encoding::PLAIN,
                    is_sorted: dict.entries == 1,
                },
                dict.uncompressed,
            ))?;
            dict_offset = Some(s.offset as i64);
            uncompressed += s.uncompressed_size as i64;
        }
        let mut first_row = 0i64;
        for p in pages {
            let num_values = u32::try_from(p.values)
                .map_err(|_| Error::Config(format!("{} values in one page", p.values)))?;
            let s = writer.write_page(CompressedPage::new(
                Page::DataPage {
                    buf: p.body,
                    num_values,
                    encoding: p.encoding,
                    def_level_encoding: Encoding::RLE,
                    rep_level_encoding: Encoding::RLE,
                    statistics: None,
                },
                p.uncompressed,
            ))?;
            first_data_offset.get_or_insert(s.offset as i64);
            uncompressed += s.uncompressed_size as i64;
            locations.push(PageLocation {
                offset: s.offset as i64,
                compressed_page_size: i32::try_from(s.compressed_size)
                    .map_err(|_| Error::Config("page over 2 GiB".into()))?,
                first_row_index: first_row,
            });
            first_row += i64::from(num_values);
        }
    }
    let bytes = sink.into_inner()?;
    let total = bytes.len() as i64;
    let metadata = ColumnChunkMetaData::builder(descr)
        .set_compression_codec(spec.codec.into())
        .set_encodings(spec.encodings)
        .set_num_values(spec.rows as i64)
        .set_total_compressed_size(total)
        .set_total_uncompressed_size(uncompressed)
        .set_dictionary_page_offset(dict_offset)
        .set_data_page_offset(first_data_offset.unwrap_or_default())
        .set_statistics(spec.stats)
        .build()?;
    Ok((
        Bytes::from(bytes),
        ColumnCloseResult {
            bytes_written: total as u64,
            rows_written: spec.rows as u64,
            metadata,
            bloom_filter: None,
            column_index: None,
            offset_index: Some(OffsetIndexMetaData {
                page_locations: locations,
                unencoded_byte_array_data_bytes: None,
            }),
        },
    ))
}

/// A column chunk of `rows` copies of `value`: a PLAIN dictionary page with the
/// value and one v1 data page whose dictionary indices (and, for a nullable
/// column, definition levels) are a single RLE run. Uncompressed: it is a few
/// dozen bytes. `None` for columns this does not cover (nested or repeated).
pub(super) fn constant_chunk(
    descr: ColumnDescPtr,
    value: &ConstValue,
    rows: usize,
) -> Result<Option<(Bytes, ColumnCloseResult)>> {
    use parquet::data_type::ByteArray;
    use parquet::file::statistics::ValueStatistics;

    if descr.max_rep_level() != 0 || descr.max_def_level() > 1 || rows == 0 {
        return Ok(None);
    }
    let (dict, stats) = match (value, descr.physical_type()) {
        (ConstValue::Utf8(b), PhysicalType::BYTE_ARRAY) => {
            let mut d = (b.len() as u32).to_le_bytes().to_vec();
            d.extend_from_slice(b);
            let v = ByteArray::from(b.clone());
            let s = ValueStatistics::new(Some(v.clone()), Some(v), None, Some(0), false);
            (d, Statistics::ByteArray(s))
        }
        (ConstValue::Int32(v), PhysicalType::INT32) => (
            v.to_le_bytes().to_vec(),
            Statistics::int32(Some(*v), Some(*v), None, Some(0), false),
        ),
        (ConstValue::Int64(v), PhysicalType::INT64) => (
            v.to_le_bytes().to_vec(),
            Statistics::int64(Some(*v), Some(*v), None, Some(0), false),
        ),
        _ => return Ok(None),
    };
    let mut data = Vec::with_capacity(32);
    if descr.max_def_level() == 1 {
        all_defined_levels(&mut data, rows);
    }
    // Dictionary indices: bit width 1, an RLE run of index 0.
    data.push(1);
    push_varint(&mut data, (rows as u64) << 1);
    data.push(0);
    let len = data.len();
    let page = DataPage {
        body: Bytes::from(data),
        uncompressed: len,
        values: rows,
        encoding: Encoding::RLE_DICTIONARY,
    };
    let spec = ChunkSpec {
        codec: Compression::UNCOMPRESSED,
        encodings: vec![Encoding::PLAIN, Encoding::RLE, Encoding::RLE_DICTIONARY],
        stats,
        rows,
    };
    let dict = DictPage {
        uncompressed: dict.len(),
        body: dict,
        entries: 1,
    };
    assemble(descr, Some(dict), vec![page], spec, Vec::new()).map(Some)
}

/// Most distinct values of a [`runs_chunk`] dictionary...
const RUNS_MAX_DISTINCT: usize = 4096;
/// ... and most bytes of it.
const RUNS_MAX_DICT_BYTES: usize = 1 << 20;
/// A dictionary of at least this many bytes is compressed (ZSTD, the lake's
/// level 3), and the chunk's data page with it: 1,000 file names otherwise
/// made the file 10 % larger than arrow-rs's.
const RUNS_COMPRESS_BYTES: usize = 1 << 10;
/// A column qualifies when its values change at most once per this many rows.
const RUNS_MIN_LENGTH: usize = 8;

/// A column chunk for a non-null `Utf8` column whose values come in long runs
/// (`source` when many files' rows are gathered into one table, one run per
/// file): a PLAIN dictionary page of the distinct values in order of first
/// appearance and one v1 data page of dictionary indices as RLE runs, built
/// in one pass that compares each value with the one before it, instead of
/// arrow-rs's per-row hashing and min/max comparisons. `None` when the
/// column is of another shape (nulls, short runs, too many distinct values),
/// so the caller uses arrow-rs's writer.
pub(super) fn runs_chunk(
    descr: ColumnDescPtr,
    cols: &[&arrow::array::ArrayRef],
    rows: usize,
) -> Result<Option<(Bytes, ColumnCloseResult)>> {
    use arrow::array::AsArray;
    use arrow::datatypes::DataType;

    if !runs_column(&descr, rows) {
        return Ok(None);
    }
    let max_runs = max_runs(rows);
    let mut runs: Vec<(&[u8], usize)> = Vec::new();
    for c in cols {
        if c.data_type() != &DataType::Utf8 || c.null_count() > 0 {
            return Ok(None);
        }
        let s = c.as_string::<i32>();
        let values = s.values().as_slice();
        for w in s.value_offsets().windows(2) {
            let (Ok(a), Ok(b)) = (usize::try_from(w[0]), usize::try_from(w[1])) else {
                return Ok(None);
            };
            let Some(v) = values.get(a..b) else {
                return Ok(None);
            };
            if !add_run(&mut runs, v, 1, max_runs) {
                return Ok(None);
            }
        }
    }
    value_runs_chunk(descr, &runs, rows)
}

/// Adds `n` rows of `v` to `runs` (to the last run when it holds `v`);
/// false when that would make more than `max_runs` runs.
fn add_run<'a>(runs: &mut Vec<(&'a [u8], usize)>, v: &'a [u8], n: usize, max_runs: usize) -> bool {
    let full = runs.len() == max_runs;
    match runs.last_mut() {
        Some((prev, m)) if *prev == v => *m += n,
        _ if full => return false,
        _ => runs.push((v, n)),
    }
    true
}

/// [`runs_chunk`] of a column given as runs of values ((value, rows), in
/// row order): the same bytes as for arrays holding those values, without
/// making them (a file name repeated over its 240 rows, for each of 1,000
/// files, was 17 MB of strings made only to be compared again here).
pub(super) fn utf8_runs_chunk(
    descr: ColumnDescPtr,
    values: &[(&str, usize)],
    rows: usize,
) -> Result<Option<(Bytes, ColumnCloseResult)>> {
    if !runs_column(&descr, rows) {
        return Ok(None);
    }
    let max_runs = max_runs(rows);
    let mut runs: Vec<(&[u8], usize)> = Vec::new();
    for (v, n) in values.iter().filter(|r| r.1 > 0) {
        if !add_run(&mut runs, v.as_bytes(), *n, max_runs) {
            return Ok(None);
        }
    }
    value_runs_chunk(descr, &runs, rows)
}

/// Most value runs of a [`runs_chunk`] of `rows` rows: a value per
/// [`RUNS_MIN_LENGTH`] rows, or any number in a large row group (from
/// [`super::BULK_ROWS`] rows: `from_host`/`to_host` of one rank per host
/// change every row, and arrow-rs's per-value hashing of them cost 6× the
/// rest of the ingest); their indices are then bit-packed.
fn max_runs(rows: usize) -> usize {
    if rows >= super::BULK_ROWS {
        rows
    } else {
        rows / RUNS_MIN_LENGTH
    }
}

/// [`utf8_runs_chunk`] of a column given as a dictionary `values` and runs of
/// indices into it ((index, rows) in row order): the same bytes, with no
/// hashing of the values (the caller numbered them).
pub(super) fn utf8_keys_chunk(
    descr: ColumnDescPtr,
    values: &[&str],
    keys: &[(u32, usize)],
    rows: usize,
) -> Result<Option<(Bytes, ColumnCloseResult)>> {
    if !runs_column(&descr, rows) {
        return Ok(None);
    }
    let max_runs = max_runs(rows);
    // Renumber by first appearance (as hashing the values would) and merge
    // adjacent runs of one value.
    let mut local: Vec<u32> = vec![u32::MAX; values.len()];
    let mut distinct: Vec<&[u8]> = Vec::new();
    let mut runs: Vec<(u32, usize)> = Vec::new();
    for (k, n) in keys.iter().filter(|r| r.1 > 0) {
        let Some(v) = values.get(*k as usize) else {
            return Err(Error::Config(format!(
                "dictionary index {k} of {} values",
                values.len()
            )));
        };
        let slot = &mut local[*k as usize];
        if *slot == u32::MAX {
            *slot = distinct.len() as u32;
            distinct.push(v.as_bytes());
        }
        let full = runs.len() == max_runs;
        match runs.last_mut() {
            Some((p, m)) if *p == *slot => *m += n,
            _ if full => return Ok(None),
            _ => runs.push((*slot, *n)),
        }
    }
    // The same limits as for values (a repeated value is one entry).
    let mut seen = std::collections::HashSet::new();
    let mut dict_bytes = 0usize;
    for v in &distinct {
        if seen.insert(*v) {
            dict_bytes += 4 + v.len();
        }
    }
    if seen.len() != distinct.len() {
        // Two indices of one value: number them by value instead.
        let value_runs: Vec<(&[u8], usize)> = runs
            .iter()
            .map(|(k, n)| (distinct[*k as usize], *n))
            .collect();
        let mut merged: Vec<(&[u8], usize)> = Vec::new();
        for (v, n) in value_runs {
            if !add_run(&mut merged, v, n, max_runs) {
                return Ok(None);
            }
        }
        return value_runs_chunk(descr, &merged, rows);
    }
    if distinct.len() > RUNS_MAX_DISTINCT || dict_bytes > RUNS_MAX_DICT_BYTES {
        return Ok(None);
    }
    dictionary_chunk(descr, &distinct, &runs, rows, dict_bytes)
}

/// Whether a column of `rows` rows may be a [`runs_chunk`] (a non-repeated
/// byte array column, long enough for runs).
fn runs_column(descr: &ColumnDescPtr, rows: usize) -> bool {
    descr.max_rep_level() == 0
        && descr.max_def_level() <= 1
        && descr.physical_type() == PhysicalType::BYTE_ARRAY
        && rows >= RUNS_MIN_LENGTH
}

/// The chunk of [`runs_chunk`] from its runs (adjacent runs hold different
/// values; at most `rows / RUNS_MIN_LENGTH` of them).
fn value_runs_chunk(
    descr: ColumnDescPtr,
    value_runs: &[(&[u8], usize)],
    rows: usize,
) -> Result<Option<(Bytes, ColumnCloseResult)>> {
    let mut runs: Vec<(u32, usize)> = Vec::with_capacity(value_runs.len());
    let mut index: std::collections::HashMap<&[u8], u32> = std::collections::HashMap::new();
    let mut distinct: Vec<&[u8]> = Vec::new();
    let mut dict_bytes = 0usize;
    for (v, n) in value_runs {
        let k = match index.get(v) {
            Some(k) => *k,
            None => {
                if distinct.len() == RUNS_MAX_DISTINCT {
                    return Ok(None);
                }
                dict_bytes += 4 + v.len();
                if dict_bytes > RUNS_MAX_DICT_BYTES {
                    return Ok(None);
                }
                let k = distinct.len() as u32;
                index.insert(v, k);
                distinct.push(v);
                k
            }
        };
        runs.push((k, *n));
    }
    dictionary_chunk(descr, &distinct, &runs, rows, dict_bytes)
}

/// The chunk of a dictionary `distinct` (in order of first appearance) and
/// runs of indices into it: a PLAIN dictionary page and one data page of
/// the indices, as RLE runs, or bit-packed when the runs are shorter than
/// [`RUNS_MIN_LENGTH`] rows on average.
fn dictionary_chunk(
    descr: ColumnDescPtr,
    distinct: &[&[u8]],
    runs: &[(u32, usize)],
    rows: usize,
    dict_bytes: usize,
) -> Result<Option<(Bytes, ColumnCloseResult)>> {
    use parquet::data_type::ByteArray;
    use parquet::file::statistics::ValueStatistics;

    let counted: usize = runs.iter().map(|r| r.1).sum();
    let (Some(min), Some(max)) = (distinct.iter().min(), distinct.iter().max()) else {
        return Ok(None);
    };
    if counted != rows {
        return Err(Error::Config(format!(
            "a row group of {rows} rows holds {counted} values"
        )));
    }
    let mut dict = Vec::with_capacity(dict_bytes);
    for v in distinct {
        dict.extend_from_slice(&(v.len() as u32).to_le_bytes());
        dict.extend_from_slice(v);
    }
    // Indices: the bit width of the largest, then one RLE run per value run
    // (header = length << 1, value in whole bytes, little-endian).
    let width = (u32::BITS - (distinct.len() as u32 - 1).leading_zeros()).max(1);
    let value_bytes = width.div_ceil(8) as usize;
    let mut data = Vec::with_capacity(16 + runs.len() * (4 + value_bytes));
    if descr.max_def_level() == 1 {
        all_defined_levels(&mut data, rows);
    }
    data.push(width as u8);
    if runs.len() > rows / RUNS_MIN_LENGTH {
        bit_packed(&mut data, runs, rows, width);
    } else {
        for (k, n) in runs {
            push_varint(&mut data, (*n as u64) << 1);
            data.extend_from_slice(&k.to_le_bytes()[..value_bytes]);
        }
    }
    let entries = u32::try_from(distinct.len())
        .map_err(|_| Error::Config("too many dictionary values".into()))?;
    let (dict_len, data_len) = (dict.len(), data.len());
    let compress = dict_len >= RUNS_COMPRESS_BYTES;
    let (dict_body, data_body, codec) = if compress {
        let z =
            |b: &[u8]| zstd::bulk::compress(b, 3).map_err(|e| Error::Config(format!("zstd: {e}")));
        (
            z(&dict)?,
            z(&data)?,
            Compression::ZSTD(ZstdLevel::try_new(3).unwrap_or_default()),
        )
    } else {
        (dict, data, Compression::UNCOMPRESSED)
    };
    let page = DataPage {
        body: Bytes::from(data_body),
        uncompressed: data_len,
        values: rows,
        encoding: Encoding::RLE_DICTIONARY,
    };
    let dict = DictPage {
        body: dict_body,
        uncompressed: dict_len,
        entries,
    };
    let stats = Statistics::ByteArray(ValueStatistics::new(
        Some(ByteArray::from(min.to_vec())),
        Some(ByteArray::from(max.to_vec())),
        None,
        Some(0),
        false,
    ));
    let spec = ChunkSpec {
        codec,
        encodings: vec![Encoding::PLAIN, Encoding::RLE, Encoding::RLE_DICTIONARY],
        stats,
        rows,
    };
    assemble(descr, Some(dict), vec![page], spec, Vec::new()).map(Some)
}

/// The indices of `runs` (`rows` of them) as one bit-packed run of the
/// RLE/bit-packing hybrid: header `(groups << 1) | 1`, then groups of 8
/// values of `width` bits, least significant bit first, the last group
/// padded with zeros (readers take the page's value count).
fn bit_packed(out: &mut Vec<u8>, runs: &[(u32, usize)], rows: usize, width: u32) {
    let groups = rows.div_ceil(8);
    push_varint(out, ((groups as u64) << 1) | 1);
    let end = out.len() + groups * width as usize;
    out.reserve(groups * width as usize);
    // Values enter an accumulator above its pending bits; whole bytes leave
    // from the bottom (width is at most 13 bits: 4,096 values).
    let (mut acc, mut bits) = (0u64, 0u32);
    for (k, n) in runs {
        for _ in 0..*n {
            acc |= u64::from(*k) << bits;
            bits += width;
            while bits >= 8 {
                out.push(acc as u8);
                acc >>= 8;
                bits -= 8;
            }
        }
    }
    if bits > 0 {
        out.push(acc as u8);
    }
    // The last group's padding.
    out.resize(end, 0);
}

/// Reusable state of the numeric chunk writer (the ZSTD context and the page
/// scratch buffer), kept across the columns and row groups of one file.
pub(super) struct NumericScratch {
    /// The float chunk builder, kept from chunk to chunk.
    floats: Option<FloatPages>,
    /// The buffer the next chunk is assembled in.
    sink: Vec<u8>,
    /// Values per data page ([`PAGE_VALUES`]; tests use small pages).
    page_values: usize,
}

impl NumericScratch {
    pub(super) fn new(page_values: usize) -> Self {
        Self {
            floats: None,
            sink: Vec::new(),
            page_values: page_values.max(1),
        }
    }
}

impl NumericScratch {
    /// The buffer the next chunk is assembled in.
    pub(super) fn take_sink(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.sink)
    }

    /// Takes back a chunk's bytes once the row group has copied them, so the
    /// next chunk is assembled in memory already faulted in.
    pub(super) fn recycle(&mut self, chunk: Bytes) {
        if let Ok(m) = chunk.try_into_mut() {
            self.sink = Vec::from(m);
        }
    }
}

/// A column chunk for a non-null `Int32`, `Int64` or `Float64` column written
/// by this module (see the module docs); `None` when the column has nulls, a
/// different type, or is nested, so the caller uses arrow-rs's writer.
pub(super) fn numeric_chunk(
    descr: ColumnDescPtr,
    cols: &[&arrow::array::ArrayRef],
    rows: usize,
    scratch: &mut NumericScratch,
) -> Result<Option<(Bytes, ColumnCloseResult)>> {
    use arrow::array::AsArray;
    use arrow::datatypes::{DataType, Float64Type, Int32Type, Int64Type};

    if descr.max_rep_level() != 0
        || descr.max_def_level() > 1
        || rows == 0
        || cols.iter().any(|c| c.null_count() > 0)
    {
        return Ok(None);
    }
    let optional = descr.max_def_level() == 1;
    let Some(first) = cols.first() else {
        return Ok(None);
    };
    if cols.iter().any(|c| c.data_type() != first.data_type()) {
        return Ok(None);
    }
    match (first.data_type(), descr.physical_type()) {
        (DataType::Int32, PhysicalType::INT32) => {
            let parts: Vec<&[i32]> = cols
                .iter()
                .map(|c| c.as_primitive::<Int32Type>().values().as_ref())
                .collect();
            let Some((pages, min, max)) =
                delta_pages::<i32>(&parts, optional, scratch.page_values)?
            else {
                return Ok(None);
            };
            let stats = Statistics::int32(Some(min), Some(max), None, Some(0), false);
            integer_chunk(descr, pages, stats, rows, std::mem::take(&mut scratch.sink)).map(Some)
        }
        (DataType::Int64, PhysicalType::INT64) => {
            let parts: Vec<&[i64]> = cols
                .iter()
                .map(|c| c.as_primitive::<Int64Type>().values().as_ref())
                .collect();
            let Some((pages, min, max)) =
                delta_pages::<i64>(&parts, optional, scratch.page_values)?
            else {
                return Ok(None);
            };
            let stats = Statistics::int64(Some(min), Some(max), None, Some(0), false);
            integer_chunk(descr, pages, stats, rows, std::mem::take(&mut scratch.sink)).map(Some)
        }
        (DataType::Float64, PhysicalType::DOUBLE) => {
            let parts: Vec<&[f64]> = cols
                .iter()
                .map(|c| c.as_primitive::<Float64Type>().values().as_ref())
                .collect();
            float_chunk(descr, &parts, rows, optional, scratch).map(Some)
        }
        _ => Ok(None),
    }
}

fn integer_chunk(
    descr: ColumnDescPtr,
    pages: Vec<DataPage>,
    stats: Statistics,
    rows: usize,
    sink: Vec<u8>,
) -> Result<(Bytes, ColumnCloseResult)> {
    let spec = ChunkSpec {
        codec: Compression::UNCOMPRESSED,
        encodings: vec![Encoding::RLE, Encoding::DELTA_BINARY_PACKED],
        stats,
        rows,
    };
    assemble(descr, None, pages, spec, sink)
}

/// Integer types written with `DELTA_BINARY_PACKED`. Deltas wrap in the
/// column's own width, as parquet-mr computes them, so every decoder that adds
/// modulo 2^32 or 2^64 and truncates gets the values back.
trait DeltaInt: Copy + Ord + Default + PartialEq {
    /// Sign-extended value (the zigzag-encoded first value and min delta).
    fn to_i64(self) -> i64;
    /// `self - other`, wrapping in the type's width.
    fn wsub(self, other: Self) -> Self;
    /// The bits of the value as an unsigned number of the type's width.
    fn unsigned(self) -> u64;
}

impl DeltaInt for i32 {
    fn to_i64(self) -> i64 {
        i64::from(self)
    }
    fn wsub(self, other: Self) -> Self {
        self.wrapping_sub(other)
    }
    fn unsigned(self) -> u64 {
        u64::from(self as u32)
    }
}

impl DeltaInt for i64 {
    fn to_i64(self) -> i64 {
        self
    }
    fn wsub(self, other: Self) -> Self {
        self.wrapping_sub(other)
    }
    fn unsigned(self) -> u64 {
        self as u64
    }
}

/// Calls `f` with consecutive runs of at most `per_page` values of the
/// concatenation of `parts`, each run as a list of sub-slices (a page may
/// straddle the batches of a row group).
fn for_each_page<'a, T>(
    parts: &[&'a [T]],
    per_page: usize,
    mut f: impl FnMut(&[&'a [T]], usize) -> Result<()>,
) -> Result<()> {
    let mut page: Vec<&'a [T]> = Vec::new();
    let mut filled = 0;
    for part in parts {
        let mut rest: &'a [T] = part;
        while !rest.is_empty() {
            let take = (per_page - filled).min(rest.len());
            let (head, tail) = rest.split_at(take);
            page.push(head);
            filled += take;
            rest = tail;
            if filled == per_page {
                f(&page, filled)?;
                page.clear();
                filled = 0;
            }
        }
    }
    if filled > 0 {
        f(&page, filled)?;
    }
    Ok(())
}

/// Encodes the concatenation of `parts` as `DELTA_BINARY_PACKED` pages of at
/// most `per_page` values; returns the pages and the minimum and maximum
/// (`None` when there are no values).
fn delta_pages<T: DeltaInt>(
    parts: &[&[T]],
    optional: bool,
    per_page: usize,
) -> Result<Option<(Vec<DataPage>, T, T)>> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let Some(first) = parts.iter().find_map(|p| p.first().copied()) else {
        return Ok(None);
    };
    let (mut lo, mut hi) = (first, first);
    let mut pages = Vec::with_capacity(total.div_ceil(per_page));
    let mut values: Vec<T> = Vec::new();
    for_each_page(parts, per_page, |page, _| {
        for s in page {
            let (l, h) = int_min_max(s, lo);
            lo = lo.min(l);
            hi = hi.max(h);
        }
        // A page inside one part (the usual case) is encoded where it is;
        // one that straddles parts is copied together first.
        if let [one] = page {
            pages.push(delta_page(one, optional));
        } else {
            values.clear();
            for s in page {
                values.extend_from_slice(s);
            }
            pages.push(delta_page(&values, optional));
        }
        Ok(())
    })?;
    Ok(Some((pages, lo, hi)))
}

/// Minimum and maximum of `values` and `start`, in one pass of eight
/// independent lanes (two folds were two passes). The baseline x86-64 target
/// has no integer min/max instructions and the loop stays scalar there, so
/// it is compiled a second time for AVX2 and that copy is used when the CPU
/// has it (every x86-64 server CPU since 2013).
fn int_min_max<T: DeltaInt>(values: &[T], start: T) -> (T, T) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { int_min_max_avx2(values, start) };
    }
    int_min_max_lanes(values, start)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn int_min_max_avx2<T: DeltaInt>(values: &[T], start: T) -> (T, T) {
    int_min_max_lanes(values, start)
}

#[inline(always)]
fn int_min_max_lanes<T: DeltaInt>(values: &[T], start: T) -> (T, T) {
    let mut lo = [start; 8];
    let mut hi = [start; 8];
    let chunks = values.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for k in 0..8 {
            lo[k] = if c[k] < lo[k] { c[k] } else { lo[k] };
            hi[k] = if c[k] > hi[k] { c[k] } else { hi[k] };
        }
    }
    for v in tail {
        lo[0] = lo[0].min(*v);
        hi[0] = hi[0].max(*v);
    }
    (
        lo.into_iter().fold(start, T::min),
        hi.into_iter().fold(start, T::max),
    )
}

/// One `DELTA_BINARY_PACKED` page of `values` (not empty): header (block size,
/// miniblocks per block, value count, first value), then per block of 128
/// deltas the minimum delta, the four miniblock bit widths and the miniblocks
/// that hold deltas (padded to 32 values).
fn delta_page<T: DeltaInt>(values: &[T], optional: bool) -> DataPage {
    delta_page_from(values.len(), optional, &mut SliceBlocks(values))
}

/// Values handed to [`delta_page_from`] a few at a time.
trait Blocks<T> {
    /// The next `n` values (fewer only at the end).
    fn next(&mut self, n: usize) -> &[T];

    /// When the next `n` values are `prev + d`, `prev + 2d`, … (one delta
    /// throughout), skips them and returns (d, the last of them). Sources
    /// that know cheaply say so; the default looks at no value.
    fn uniform(&mut self, _n: usize, _prev: T) -> Option<(T, T)> {
        None
    }
}

/// The values of a slice.
struct SliceBlocks<'a, T>(&'a [T]);

impl<T> Blocks<T> for SliceBlocks<'_, T> {
    fn next(&mut self, n: usize) -> &[T] {
        let (head, tail) = self.0.split_at(n.min(self.0.len()));
        self.0 = tail;
        head
    }
}

/// The values of [`IntRuns`], made a block at a time.
struct RunBlocks<'a> {
    cursor: RunsCursor<'a>,
    buf: [i32; BLOCK],
}

impl Blocks<i32> for RunBlocks<'_> {
    fn next(&mut self, n: usize) -> &[i32] {
        let n = n.min(BLOCK);
        let got = self.cursor.fill(&mut self.buf[..n]);
        &self.buf[..got]
    }

    fn uniform(&mut self, n: usize, prev: i32) -> Option<(i32, i32)> {
        self.cursor.skip_uniform(n, prev)
    }
}

/// [`delta_page`] of `n` values taken from `src` (the first value, then
/// blocks of up to 128): a slice, or values made on the fly ([`IntRuns`]).
/// Either way the same bytes for the same values.
fn delta_page_from<T: DeltaInt>(n: usize, optional: bool, src: &mut impl Blocks<T>) -> DataPage {
    // Runs and ascending sequences take a few bytes per block; a first guess.
    let mut body = Vec::with_capacity(n / 8 + 64);
    if optional {
        all_defined_levels(&mut body, n);
    }
    push_varint(&mut body, BLOCK as u64);
    push_varint(&mut body, MINIBLOCKS as u64);
    push_varint(&mut body, n as u64);
    let Some(&first) = (if n > 0 { src.next(1).first() } else { None }) else {
        push_zigzag(&mut body, 0);
        let len = body.len();
        return DataPage {
            body: Bytes::from(body),
            uncompressed: len,
            values: 0,
            encoding: Encoding::DELTA_BINARY_PACKED,
        };
    };
    push_zigzag(&mut body, first.to_i64());
    let mut prev = first;
    let mut deltas = [T::default(); BLOCK];
    let mut offsets = [0u64; BLOCK];
    let mut left = n - 1;
    while left > 0 {
        if let Some((d, last)) = src.uniform(left.min(BLOCK), prev) {
            // As the `same` case below, without making the values.
            left -= left.min(BLOCK);
            prev = last;
            push_zigzag(&mut body, d.to_i64());
            body.extend_from_slice(&[0; MINIBLOCKS]);
            continue;
        }
        let block = src.next(left.min(BLOCK));
        let len = block.len();
        if len == 0 {
            break;
        }
        left -= len;
        let d = &mut deltas[..len];
        let d0 = block[0].wsub(prev);
        d[0] = d0;
        let mut same = true;
        for (slot, w) in d[1..].iter_mut().zip(block.windows(2)) {
            *slot = w[1].wsub(w[0]);
            same &= *slot == d0;
        }
        prev = block[len - 1];
        if same {
            // Runs and steady sequences (most blocks of rank and step
            // columns): every offset is 0, so all four bit widths are 0 and
            // the block is just its minimum delta.
            push_zigzag(&mut body, d0.to_i64());
            body.extend_from_slice(&[0; MINIBLOCKS]);
            continue;
        }
        let min = d.iter().copied().fold(d0, T::min);
        push_zigzag(&mut body, min.to_i64());
        let o = &mut offsets[..len];
        for (slot, v) in o.iter_mut().zip(d.iter()) {
            *slot = v.wsub(min).unsigned();
        }
        let mut widths = [0u8; MINIBLOCKS];
        for (w, chunk) in widths.iter_mut().zip(o.chunks(MINI)) {
            let or = chunk.iter().fold(0u64, |a, v| a | v);
            *w = (64 - or.leading_zeros()) as u8;
        }
        body.extend_from_slice(&widths);
        for (m, chunk) in o.chunks(MINI).enumerate() {
            let width = u32::from(widths[m]);
            if width == 0 {
                continue;
            }
            // The last miniblock is padded with zero offsets to 32 values.
            let mut mini = [0u64; MINI];
            mini[..chunk.len()].copy_from_slice(chunk);
            pack(&mut body, &mini, width);
        }
    }
    let len = body.len();
    DataPage {
        body: Bytes::from(body),
        uncompressed: len,
        values: n,
        encoding: Encoding::DELTA_BINARY_PACKED,
    }
}

/// The `DELTA_BINARY_PACKED` chunk of an [`IntRuns`] column, in pages of
/// `scratch`'s size: the values are made a block at a time, never stored.
/// The same bytes as [`numeric_chunk`] of the same values.
pub(super) fn runs_int_chunk(
    descr: ColumnDescPtr,
    runs: &IntRuns,
    scratch: &mut NumericScratch,
) -> Result<Option<(Bytes, ColumnCloseResult)>> {
    let rows = runs.len();
    if descr.max_rep_level() != 0
        || descr.max_def_level() > 1
        || rows == 0
        || descr.physical_type() != PhysicalType::INT32
    {
        return Ok(None);
    }
    let Some((min, max)) = runs.min_max() else {
        return Ok(None);
    };
    let optional = descr.max_def_level() == 1;
    let per_page = scratch.page_values;
    let mut blocks = RunBlocks {
        cursor: runs.cursor(),
        buf: [0; BLOCK],
    };
    let mut pages = Vec::with_capacity(rows.div_ceil(per_page));
    let mut at = 0;
    while at < rows {
        let n = per_page.min(rows - at);
        pages.push(delta_page_from(n, optional, &mut blocks));
        at += n;
    }
    let stats = Statistics::int32(Some(min), Some(max), None, Some(0), false);
    integer_chunk(descr, pages, stats, rows, std::mem::take(&mut scratch.sink)).map(Some)
}

/// Packs 32 values of `width` bits LSB first (4 × width bytes).
fn pack(out: &mut Vec<u8>, values: &[u64; MINI], width: u32) {
    if width == 0 {
        return;
    }
    let mut acc: u128 = 0;
    let mut bits = 0u32;
    for &v in values {
        acc |= u128::from(v) << bits;
        bits += width;
        if bits >= 64 {
            out.extend_from_slice(&(acc as u64).to_le_bytes());
            acc >>= 64;
            bits -= 64;
        }
    }
    // 32 × width bits is a whole number of bytes.
    let tail = (bits / 8) as usize;
    out.extend_from_slice(&(acc as u64).to_le_bytes()[..tail]);
}

/// `BYTE_STREAM_SPLIT` + ZSTD pages of a non-null `Float64` column.
fn float_chunk(
    descr: ColumnDescPtr,
    parts: &[&[f64]],
    rows: usize,
    optional: bool,
    scratch: &mut NumericScratch,
) -> Result<(Bytes, ColumnCloseResult)> {
    let mut pages = match scratch.floats.take() {
        Some(f) if f.per_page == scratch.page_values && f.optional == optional => f,
        _ => FloatPages::new(scratch.page_values, optional),
    };
    pages.clear();
    for p in parts {
        pages.push(p)?;
    }
    debug_assert_eq!(pages.len(), rows);
    let chunk = pages.take_chunk(descr, std::mem::take(&mut scratch.sink));
    scratch.floats = Some(pages);
    chunk
}

/// Room before a page's byte streams for its v1 definition levels (an
/// optional column's: a 4-byte length, a varint of at most 10 bytes, one byte).
const LEVELS_ROOM: usize = 16;

/// A non-null `Float64` column chunk of a large table, built as its values
/// come: their bytes go straight into the `BYTE_STREAM_SPLIT` page being
/// filled, and a full page is compressed (ZSTD) while it is still in cache.
/// A reader with the values in its input (the LinkTest ingest's mapped file)
/// hands them over without first copying them into a column of the row group
/// ([`GroupColumn::Float64Pages`](super::GroupColumn::Float64Pages)). The
/// chunk is the one [`float_chunk`] writes for the same values (it is built
/// here too).
pub struct FloatPages {
    per_page: usize,
    optional: bool,
    zstd: Option<zstd::bulk::Compressor<'static>>,
    /// [`LEVELS_ROOM`] bytes, then the page's 8 streams, `per_page` bytes apart.
    page: Vec<u8>,
    /// Values in the page being filled.
    filled: usize,
    /// The chunk's compressed pages, one after another.
    bodies: Vec<u8>,
    /// Each page's span of `bodies`, uncompressed size and values.
    spans: Vec<(std::ops::Range<usize>, usize, usize)>,
    rows: usize,
    lo: f64,
    hi: f64,
}

impl std::fmt::Debug for FloatPages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FloatPages")
            .field("rows", &self.rows)
            .field("pages", &self.spans.len())
            .finish()
    }
}

impl FloatPages {
    /// An empty chunk of a column of the large-table page size, non-null
    /// (`optional` = false) or declared optional without nulls.
    pub fn new_bulk(optional: bool) -> Self {
        Self::new(PAGE_VALUES, optional)
    }

    pub(super) fn new(page_values: usize, optional: bool) -> Self {
        Self {
            per_page: page_values.max(1),
            optional,
            zstd: None,
            page: Vec::new(),
            filled: 0,
            bodies: Vec::new(),
            spans: Vec::new(),
            rows: 0,
            lo: f64::INFINITY,
            hi: f64::NEG_INFINITY,
        }
    }

    /// Values so far.
    pub fn len(&self) -> usize {
        self.rows
    }

    /// No values yet.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Drops the values, keeping the memory.
    pub fn clear(&mut self) {
        self.filled = 0;
        self.bodies.clear();
        self.spans.clear();
        self.rows = 0;
        self.lo = f64::INFINITY;
        self.hi = f64::NEG_INFINITY;
    }

    /// Appends `values`.
    pub fn push(&mut self, values: &[f64]) -> Result<()> {
        if cfg!(target_endian = "little") {
            // SAFETY: any f64 is 8 initialised bytes, and u8 needs no alignment.
            let raw = unsafe {
                std::slice::from_raw_parts(
                    values.as_ptr().cast::<u8>(),
                    std::mem::size_of_val(values),
                )
            };
            self.push_le(raw)
        } else {
            let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            self.push_le(&raw)
        }
    }

    /// Appends the values whose little-endian bytes are `raw` (8 per value;
    /// no alignment needed).
    pub fn push_le(&mut self, raw: &[u8]) -> Result<()> {
        if !raw.len().is_multiple_of(8) {
            return Err(Error::Config(format!(
                "{} bytes are not a whole number of f64 values",
                raw.len()
            )));
        }
        let need = LEVELS_ROOM + 8 * self.per_page;
        if self.page.len() < need {
            // Zeroed once; every byte a page is compressed from is written
            // before (the streams of the values it holds, then the levels).
            self.page.resize(need, 0);
        }
        let mut rest = raw;
        while !rest.is_empty() {
            let take = (8 * (self.per_page - self.filled)).min(rest.len());
            let (head, tail) = rest.split_at(take);
            split_streams(
                head,
                &mut self.page[LEVELS_ROOM..],
                self.per_page,
                self.filled,
            );
            // f64::min/max ignore a NaN operand: NaNs stay out of the statistics.
            let (l, h) = min_max_le(head);
            self.lo = self.lo.min(l);
            self.hi = self.hi.max(h);
            self.filled += take / 8;
            self.rows += take / 8;
            if self.filled == self.per_page {
                self.seal()?;
            }
            rest = tail;
        }
        Ok(())
    }

    /// Compresses the page being filled, if it holds values.
    fn seal(&mut self) -> Result<()> {
        let n = self.filled;
        if n == 0 {
            return Ok(());
        }
        let streams = &mut self.page[LEVELS_ROOM..];
        if n < self.per_page {
            // A last, short page: its streams close up to n bytes apart (each
            // moves down past the ones already moved, never over a later one).
            for k in 1..8 {
                let from = k * self.per_page;
                streams.copy_within(from..from + n, k * n);
            }
        }
        let mut start = LEVELS_ROOM;
        if self.optional {
            let mut levels = Vec::with_capacity(LEVELS_ROOM);
            all_defined_levels(&mut levels, n);
            start -= levels.len();
            self.page[start..LEVELS_ROOM].copy_from_slice(&levels);
        }
        let input = &self.page[start..LEVELS_ROOM + 8 * n];
        let zstd = match &mut self.zstd {
            Some(z) => z,
            None => self.zstd.insert(
                zstd::bulk::Compressor::new(FLOAT_ZSTD_LEVEL)
                    .map_err(|e| Error::Config(format!("zstd compressor: {e}")))?,
            ),
        };
        let from = self.bodies.len();
        self.bodies
            .reserve(zstd::zstd_safe::compress_bound(input.len()));
        let mut out = std::io::Cursor::new(std::mem::take(&mut self.bodies));
        out.set_position(from as u64);
        let r = zstd.compress_to_buffer(input, &mut out);
        self.bodies = out.into_inner();
        r.map_err(|e| Error::Config(format!("zstd: {e}")))?;
        self.spans.push((from..self.bodies.len(), input.len(), n));
        self.filled = 0;
        Ok(())
    }

    /// The column chunk of the values so far, assembled in `sink`; the values
    /// are dropped and the memory kept for the next chunk.
    pub(crate) fn take_chunk(
        &mut self,
        descr: ColumnDescPtr,
        sink: Vec<u8>,
    ) -> Result<(Bytes, ColumnCloseResult)> {
        if descr.max_rep_level() != 0
            || descr.max_def_level() != i16::from(self.optional)
            || descr.physical_type() != PhysicalType::DOUBLE
        {
            return Err(Error::Config(format!(
                "column {}: not a {} DOUBLE column",
                descr.path(),
                if self.optional {
                    "flat optional"
                } else {
                    "required"
                }
            )));
        }
        self.seal()?;
        let level = ZstdLevel::try_new(FLOAT_ZSTD_LEVEL)?;
        let all = Bytes::from(std::mem::take(&mut self.bodies));
        let pages = self
            .spans
            .drain(..)
            .map(|(range, uncompressed, n)| DataPage {
                body: all.slice(range),
                uncompressed,
                values: n,
                encoding: Encoding::BYTE_STREAM_SPLIT,
            })
            .collect();
        // Parquet's rules for float statistics: NaNs are left out, a zero minimum
        // is written as -0.0 and a zero maximum as +0.0.
        let (lo, hi) = (self.lo, self.hi);
        let stats = if lo <= hi {
            let lo = if lo == 0.0 { -0.0 } else { lo };
            let hi = if hi == 0.0 { 0.0 } else { hi };
            Statistics::double(Some(lo), Some(hi), None, Some(0), false)
        } else {
            Statistics::double(None, None, None, Some(0), false)
        };
        let spec = ChunkSpec {
            codec: Compression::ZSTD(level),
            encodings: vec![Encoding::RLE, Encoding::BYTE_STREAM_SPLIT],
            stats,
            rows: self.rows,
        };
        let chunk = assemble(descr, None, pages, spec, sink);
        // The pages were copied into the chunk: keep their buffer.
        if let Ok(m) = all.try_into_mut() {
            self.bodies = Vec::from(m);
        }
        self.clear();
        chunk
    }
}

/// Minimum and maximum of the f64 values whose little-endian bytes are `raw`,
/// ignoring NaNs ((+inf, -inf) when there is no other value); four independent
/// lanes so the loop vectorises.
fn min_max_le(raw: &[u8]) -> (f64, f64) {
    let value = |c: &[u8]| f64::from_le_bytes(c.try_into().unwrap_or_default());
    let mut lo = [f64::INFINITY; 4];
    let mut hi = [f64::NEG_INFINITY; 4];
    let chunks = raw.chunks_exact(32);
    let tail = chunks.remainder();
    for c in chunks {
        for k in 0..4 {
            let v = value(&c[8 * k..8 * k + 8]);
            lo[k] = lo[k].min(v);
            hi[k] = hi[k].max(v);
        }
    }
    for c in tail.chunks_exact(8) {
        lo[0] = lo[0].min(value(c));
        hi[0] = hi[0].max(value(c));
    }
    (
        lo[0].min(lo[1]).min(lo[2].min(lo[3])),
        hi[0].max(hi[1]).max(hi[2].max(hi[3])),
    )
}

/// `BYTE_STREAM_SPLIT` of 8-byte values (`raw`: their little-endian bytes)
/// into a page whose streams are `n` bytes apart: byte k of value i goes to
/// `out[k * n + at + i]`.
fn split_streams(raw: &[u8], out: &mut [u8], n: usize, at: usize) {
    #[cfg(target_arch = "x86_64")]
    let done = split16_sse2(raw, out, n, at);
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    split_scalar(raw.get(8 * done..).unwrap_or_default(), out, n, at + done);
}

fn split_scalar(raw: &[u8], out: &mut [u8], n: usize, at: usize) {
    for (i, v) in raw.chunks_exact(8).enumerate() {
        for (k, b) in v.iter().enumerate() {
            if let Some(dst) = out.get_mut(k * n + at + i) {
                *dst = *b;
            }
        }
    }
}

/// The stream split of 16 values at a time with SSE2 (part of every x86-64
/// CPU): the 128 bytes of 16 values sit in eight registers; four rounds of
/// byte interleaving (`new[2i], new[2i+1] = unpack_lo/hi(old[i], old[i+4])`)
/// each rotate the 7-bit byte index left by one, and four rotations turn
/// "value, byte" order into "byte, value" order, so register k then holds
/// byte k of the 16 values. Returns how many values it handled (a multiple of
/// 16); the rest is left to the scalar loop.
#[cfg(target_arch = "x86_64")]
fn split16_sse2(raw: &[u8], out: &mut [u8], n: usize, at: usize) -> usize {
    use std::arch::x86_64::{
        __m128i, _mm_loadu_si128, _mm_storeu_si128, _mm_unpackhi_epi8, _mm_unpacklo_epi8,
    };
    let groups = raw.len() / 128;
    // Every store below stays inside `out` when the last stream's end does.
    if groups == 0 || out.len() < 7 * n + at + groups * 16 {
        return 0;
    }
    let src = raw.as_ptr();
    let dst = out.as_mut_ptr();
    for g in 0..groups {
        // SAFETY: SSE2 is part of the x86-64 baseline. Loads read
        // raw[128g..128g+128] (in bounds: g < len / 128); stores write
        // out[k*n + at + 16g .. +16] for k < 8, in bounds by the check above.
        unsafe {
            let base = src.add(g * 128);
            let mut r: [__m128i; 8] =
                std::array::from_fn(|j| _mm_loadu_si128(base.add(16 * j).cast::<__m128i>()));
            for _ in 0..4 {
                r = [
                    _mm_unpacklo_epi8(r[0], r[4]),
                    _mm_unpackhi_epi8(r[0], r[4]),
                    _mm_unpacklo_epi8(r[1], r[5]),
                    _mm_unpackhi_epi8(r[1], r[5]),
                    _mm_unpacklo_epi8(r[2], r[6]),
                    _mm_unpackhi_epi8(r[2], r[6]),
                    _mm_unpacklo_epi8(r[3], r[7]),
                    _mm_unpackhi_epi8(r[3], r[7]),
                ];
            }
            for (k, reg) in r.iter().enumerate() {
                _mm_storeu_si128(dst.add(k * n + at + g * 16).cast::<__m128i>(), *reg);
            }
        }
    }
    groups * 16
}
