//! Column chunks the lake writes itself instead of going through arrow-rs's
//! column writer, for the shapes that dominate large tables (16.8 M rows of
//! `linktest_timings` for one 4,096-rank LinkTest run):
//!
//! - constant columns (`run_id`, `source`, `permutation`): a one-entry PLAIN
//!   dictionary page and one data page holding a single RLE run, a few dozen
//!   bytes in constant time ([`constant_chunk`]);
//! - non-null `Int32`/`Int64` columns: `DELTA_BINARY_PACKED` pages, uncompressed
//!   (rank and step columns are runs or ascending sequences: most miniblocks
//!   have bit width 0 or 1) ([`numeric_chunk`]);
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

use crate::error::{Error, Result};

/// Values per data page of the numeric chunks: 1 MiB of `f64`, as arrow-rs's
/// default page size, and a multiple of the delta block size.
pub(super) const PAGE_VALUES: usize = 1 << 17;

/// ZSTD level of the float pages: level 1 is the fastest standard level; the
/// byte streams that matter (zeros, exponents) compress as well as at higher
/// levels.
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
    body: Vec<u8>,
    uncompressed: usize,
    values: usize,
    encoding: Encoding,
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
fn assemble(
    descr: ColumnDescPtr,
    dict: Option<Vec<u8>>,
    pages: Vec<DataPage>,
    spec: ChunkSpec,
) -> Result<(Bytes, ColumnCloseResult)> {
    let body_bytes: usize = pages.iter().map(|p| p.body.len() + 64).sum();
    let mut sink = TrackedWrite::new(Vec::with_capacity(body_bytes + 128));
    let mut dict_offset = None;
    let mut first_data_offset = None;
    let mut uncompressed = 0i64;
    let mut locations = Vec::with_capacity(pages.len());
    {
        let mut writer = SerializedPageWriter::new(&mut sink);
        if let Some(dict) = dict {
            let len = dict.len();
            let s = writer.write_page(CompressedPage::new(
                Page::DictionaryPage {
                    buf: Bytes::from(dict),
                    num_values: 1,
                    encoding: Encoding::PLAIN,
                    is_sorted: true,
                },
                len,
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
                    buf: Bytes::from(p.body),
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
        body: data,
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
    assemble(descr, Some(dict), vec![page], spec).map(Some)
}

/// Reusable state of the numeric chunk writer (the ZSTD context and the page
/// scratch buffer), kept across the columns and row groups of one file.
pub(super) struct NumericScratch {
    zstd: Option<zstd::bulk::Compressor<'static>>,
    page: Vec<u8>,
    /// Values per data page ([`PAGE_VALUES`]; tests use small pages).
    page_values: usize,
}

impl NumericScratch {
    pub(super) fn new(page_values: usize) -> Self {
        Self {
            zstd: None,
            page: Vec::new(),
            page_values: page_values.max(1),
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
            let Some((pages, min, max)) = delta_pages::<i32>(&parts, optional, scratch.page_values)
            else {
                return Ok(None);
            };
            let stats = Statistics::int32(Some(min), Some(max), None, Some(0), false);
            integer_chunk(descr, pages, stats, rows).map(Some)
        }
        (DataType::Int64, PhysicalType::INT64) => {
            let parts: Vec<&[i64]> = cols
                .iter()
                .map(|c| c.as_primitive::<Int64Type>().values().as_ref())
                .collect();
            let Some((pages, min, max)) = delta_pages::<i64>(&parts, optional, scratch.page_values)
            else {
                return Ok(None);
            };
            let stats = Statistics::int64(Some(min), Some(max), None, Some(0), false);
            integer_chunk(descr, pages, stats, rows).map(Some)
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
) -> Result<(Bytes, ColumnCloseResult)> {
    let spec = ChunkSpec {
        codec: Compression::UNCOMPRESSED,
        encodings: vec![Encoding::RLE, Encoding::DELTA_BINARY_PACKED],
        stats,
        rows,
    };
    assemble(descr, None, pages, spec)
}

/// Integer types written with `DELTA_BINARY_PACKED`. Deltas wrap in the
/// column's own width, as parquet-mr computes them, so every decoder that adds
/// modulo 2^32 or 2^64 and truncates gets the values back.
trait DeltaInt: Copy + Ord {
    fn to_i64(self) -> i64;
    /// `self - prev` wrapped to the type's width, sign-extended.
    fn delta(self, prev: Self) -> i64;
    /// `delta - min` wrapped to the type's width, as an unsigned value.
    fn offset(delta: i64, min: i64) -> u64;
}

impl DeltaInt for i32 {
    fn to_i64(self) -> i64 {
        i64::from(self)
    }
    fn delta(self, prev: Self) -> i64 {
        i64::from(self.wrapping_sub(prev))
    }
    fn offset(delta: i64, min: i64) -> u64 {
        u64::from((delta as i32).wrapping_sub(min as i32) as u32)
    }
}

impl DeltaInt for i64 {
    fn to_i64(self) -> i64 {
        self
    }
    fn delta(self, prev: Self) -> i64 {
        self.wrapping_sub(prev)
    }
    fn offset(delta: i64, min: i64) -> u64 {
        delta.wrapping_sub(min) as u64
    }
}

/// Encodes the concatenation of `parts` as `DELTA_BINARY_PACKED` pages of at
/// most [`PAGE_VALUES`] values; returns the pages and the minimum and maximum
/// (`None` when there are no values).
fn delta_pages<T: DeltaInt + Default>(
    parts: &[&[T]],
    optional: bool,
    per_page: usize,
) -> Option<(Vec<DataPage>, T, T)> {
    let values = parts.iter().flat_map(|p| p.iter().copied());
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let mut pages = Vec::with_capacity(total.div_ceil(per_page));
    let mut min_max: Option<(T, T)> = None;
    let mut page = DeltaPage::<T>::new(optional, total.min(per_page));
    for v in values {
        min_max = Some(match min_max {
            None => (v, v),
            Some((lo, hi)) => (lo.min(v), hi.max(v)),
        });
        page.push(v);
        if page.count == per_page {
            let left = total - (pages.len() + 1) * per_page;
            let next = DeltaPage::new(optional, left.min(per_page));
            pages.push(std::mem::replace(&mut page, next).finish());
        }
    }
    if page.count > 0 {
        pages.push(page.finish());
    }
    min_max.map(|(lo, hi)| (pages, lo, hi))
}

/// One `DELTA_BINARY_PACKED` page being filled.
struct DeltaPage<T: DeltaInt> {
    /// Page body after the header: the blocks.
    blocks: Vec<u8>,
    optional: bool,
    first: Option<T>,
    prev: T,
    /// Deltas of the block being filled.
    deltas: [i64; BLOCK],
    pending: usize,
    count: usize,
}

impl<T: DeltaInt + Default> DeltaPage<T> {
    fn new(optional: bool, expect: usize) -> Self {
        Self {
            // Runs and ascending sequences take a few bytes per block; this is
            // only a first guess for the capacity.
            blocks: Vec::with_capacity(expect / 8 + 64),
            optional,
            first: None,
            prev: T::default(),
            deltas: [0; BLOCK],
            pending: 0,
            count: 0,
        }
    }

    fn push(&mut self, v: T) {
        self.count += 1;
        if self.first.is_none() {
            self.first = Some(v);
            self.prev = v;
            return;
        }
        self.deltas[self.pending] = v.delta(self.prev);
        self.prev = v;
        self.pending += 1;
        if self.pending == BLOCK {
            self.flush_block();
        }
    }

    /// Writes the pending deltas as one block: min delta, the four miniblock
    /// bit widths, then the miniblocks that hold deltas (padded to 32 values).
    fn flush_block(&mut self) {
        let n = self.pending;
        if n == 0 {
            return;
        }
        let deltas = &self.deltas[..n];
        // Deltas are sign-extended from the type's width, so they order as
        // values of that width.
        let min = deltas.iter().copied().fold(i64::MAX, i64::min);
        push_zigzag(&mut self.blocks, min);
        let used = n.div_ceil(MINI);
        let mut offsets = [[0u64; MINI]; MINIBLOCKS];
        let mut widths = [0u8; MINIBLOCKS];
        for (m, chunk) in deltas.chunks(MINI).enumerate() {
            let mut or = 0u64;
            for (slot, d) in offsets[m].iter_mut().zip(chunk) {
                *slot = T::offset(*d, min);
                or |= *slot;
            }
            widths[m] = (64 - or.leading_zeros()) as u8;
        }
        self.blocks.extend_from_slice(&widths);
        for m in 0..used {
            pack(&mut self.blocks, &offsets[m], u32::from(widths[m]));
        }
        self.pending = 0;
    }

    fn finish(mut self) -> DataPage {
        self.flush_block();
        let mut body = Vec::with_capacity(self.blocks.len() + 32);
        if self.optional {
            all_defined_levels(&mut body, self.count);
        }
        push_varint(&mut body, BLOCK as u64);
        push_varint(&mut body, MINIBLOCKS as u64);
        push_varint(&mut body, self.count as u64);
        push_zigzag(&mut body, self.first.map(T::to_i64).unwrap_or_default());
        body.extend_from_slice(&self.blocks);
        let len = body.len();
        DataPage {
            body,
            uncompressed: len,
            values: self.count,
            encoding: Encoding::DELTA_BINARY_PACKED,
        }
    }
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
    let level = ZstdLevel::try_new(FLOAT_ZSTD_LEVEL)?;
    if scratch.zstd.is_none() {
        scratch.zstd = Some(
            zstd::bulk::Compressor::new(FLOAT_ZSTD_LEVEL)
                .map_err(|e| Error::Config(format!("zstd compressor: {e}")))?,
        );
    }
    let per_page = scratch.page_values;
    let mut pages = Vec::with_capacity(rows.div_ceil(per_page));
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut any = false;
    // Walk the parts page by page without concatenating them.
    let mut part = 0;
    let mut at = 0;
    let mut left = rows;
    let mut page_vals: Vec<f64> = Vec::with_capacity(rows.min(per_page));
    while left > 0 {
        let n = left.min(per_page);
        page_vals.clear();
        while page_vals.len() < n {
            let Some(p) = parts.get(part) else { break };
            let take = (n - page_vals.len()).min(p.len() - at);
            page_vals.extend_from_slice(&p[at..at + take]);
            at += take;
            if at == p.len() {
                part += 1;
                at = 0;
            }
        }
        let n = page_vals.len();
        if n == 0 {
            break;
        }
        left -= n;
        for v in &page_vals {
            if !v.is_nan() {
                any = true;
                lo = lo.min(*v);
                hi = hi.max(*v);
            }
        }
        let buf = &mut scratch.page;
        buf.clear();
        if optional {
            all_defined_levels(buf, n);
        }
        let start = buf.len();
        buf.resize(start + 8 * n, 0);
        split_streams(&page_vals, &mut buf[start..]);
        let uncompressed = buf.len();
        let zstd = scratch
            .zstd
            .as_mut()
            .ok_or_else(|| Error::Config("zstd compressor missing".into()))?;
        let body = zstd
            .compress(buf)
            .map_err(|e| Error::Config(format!("zstd: {e}")))?;
        pages.push(DataPage {
            body,
            uncompressed,
            values: n,
            encoding: Encoding::BYTE_STREAM_SPLIT,
        });
    }
    // Parquet's rules for float statistics: NaNs are left out, a zero minimum
    // is written as -0.0 and a zero maximum as +0.0.
    let stats = if any {
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
        rows,
    };
    assemble(descr, None, pages, spec)
}

/// `BYTE_STREAM_SPLIT` of 8-byte values: byte k of value i goes to
/// `out[k * n + i]`.
fn split_streams(values: &[f64], out: &mut [u8]) {
    let n = values.len();
    let (s0, rest) = out.split_at_mut(n);
    let (s1, rest) = rest.split_at_mut(n);
    let (s2, rest) = rest.split_at_mut(n);
    let (s3, rest) = rest.split_at_mut(n);
    let (s4, rest) = rest.split_at_mut(n);
    let (s5, rest) = rest.split_at_mut(n);
    let (s6, s7) = rest.split_at_mut(n);
    for (i, v) in values.iter().enumerate() {
        let b = v.to_le_bytes();
        s0[i] = b[0];
        s1[i] = b[1];
        s2[i] = b[2];
        s3[i] = b[3];
        s4[i] = b[4];
        s5[i] = b[5];
        s6[i] = b[6];
        s7[i] = b[7];
    }
}
