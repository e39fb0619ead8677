//! Tables of the OSU micro-benchmarks (osu_latency, osu_bw, osu_bibw; the
//! `osu` ingest kind, docs/architecture.md "Adding a benchmark kind").
use arrow::datatypes::DataType::*;

use super::*;

/// OSU tables.
pub fn tables() -> Vec<TableDef> {
    vec![table(
        "osu_results",
        "One row per message size of an OSU micro-benchmark's text output (osu_latency, osu_bw, osu_bibw).",
        vec![
            run_id(),
            source(),
            (
                "benchmark",
                utf8(),
                false,
                "`osu_latency`, `osu_bw` or `osu_bibw` (from the output's title line)",
            ),
            (
                "version",
                utf8(),
                false,
                "the OSU micro-benchmarks' version of the title line (`7.3`)",
            ),
            ("size_bytes", Int64, false, "message size (bytes)"),
            (
                "value",
                Float64,
                false,
                "the measurement at that size: the (average) latency for osu_latency, the bandwidth for osu_bw and osu_bibw",
            ),
            (
                "unit",
                utf8(),
                false,
                "`us` (latency) or `MB/s` (bandwidth, 10^6 bytes/s)",
            ),
        ],
    )]
}
