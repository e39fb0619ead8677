//! The table catalog: the Arrow schema of every lake table. Column names are a
//! public contract (users' SQL depends on them); docs/tables.md is generated from
//! here by `benchlake tables docs`.
//!
//! Each domain owns one submodule; [`all`] lists every table.
use std::sync::{Arc, OnceLock};

use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

pub mod counts;
pub mod io;
pub mod linktest;
pub mod osu;
pub mod replay;
pub mod system;
pub mod tracer;

/// One table of the lake.
#[derive(Debug, Clone)]
pub struct TableDef {
    /// Table name (directory under `tables/`).
    pub name: &'static str,
    /// One line saying what a row is.
    pub doc: &'static str,
    /// The Arrow schema of the rows a job makes (without the `date` column
    /// every file of the table adds: [`file_schema`]).
    pub schema: SchemaRef,
    /// Per-column descriptions, same order as the schema.
    pub column_docs: Vec<&'static str>,
}

/// A column: name, type, nullable, description.
pub type Col = (&'static str, DataType, bool, &'static str);

/// Builds a [`TableDef`] from columns.
pub fn table(name: &'static str, doc: &'static str, cols: Vec<Col>) -> TableDef {
    let fields: Vec<Field> = cols
        .iter()
        .map(|(n, t, null, _)| Field::new(*n, t.clone(), *null))
        .collect();
    TableDef {
        name,
        doc,
        schema: Arc::new(Schema::new(fields)),
        column_docs: cols.iter().map(|c| c.3).collect(),
    }
}

/// `utf8`
pub fn utf8() -> DataType {
    DataType::Utf8
}
/// `timestamp[us, UTC]`
pub fn ts() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}
/// `list<item>` with nullable items.
pub fn list(item: DataType) -> DataType {
    DataType::List(Arc::new(Field::new("item", item, true)))
}

/// The `run_id` column every table carries.
pub fn run_id() -> Col {
    ("run_id", utf8(), false, "run that produced the row")
}
/// The `source` column every input-derived table carries.
pub fn source() -> Col {
    (
        "source",
        utf8(),
        false,
        "raw object key or input file name the row was read from",
    )
}

/// Every table, in documentation order.
pub fn all() -> &'static [TableDef] {
    static ALL: OnceLock<Vec<TableDef>> = OnceLock::new();
    ALL.get_or_init(|| {
        let mut v = Vec::new();
        v.extend(system::tables());
        v.extend(linktest::tables());
        v.extend(osu::tables());
        v.extend(io::tables());
        v.extend(counts::tables());
        v.extend(replay::tables());
        v.extend(tracer::tables());
        v
    })
}

/// The definition of one table.
pub fn get(name: &str) -> Option<&'static TableDef> {
    all().iter().find(|t| t.name == name)
}

/// The schema of one table, or an error naming it.
pub fn schema(name: &str) -> crate::Result<SchemaRef> {
    get(name)
        .map(|t| t.schema.clone())
        .ok_or_else(|| crate::Error::UnknownTable(name.to_string()))
}

/// The column every table file carries last, after the catalog's columns: the
/// run's date partition (its UTC day, `Date32`, never null). It is what a
/// path's `date=` gives with `hive_partitioning=true`, kept in the file so that
/// rows keep their day wherever the file lives (docs/architecture.md,
/// "Compaction").
pub const DATE_COLUMN: &str = "date";

/// The `date` field of [`DATE_COLUMN`].
pub fn date_field() -> Field {
    Field::new(DATE_COLUMN, DataType::Date32, false)
}

/// The schema of a table's files: the catalog's columns, then `date`.
pub fn file_schema(name: &str) -> crate::Result<SchemaRef> {
    static FILES: OnceLock<Vec<SchemaRef>> = OnceLock::new();
    let files = FILES.get_or_init(|| {
        all()
            .iter()
            .map(|t| {
                let mut fields: Vec<Field> = t
                    .schema
                    .fields()
                    .iter()
                    .map(|f| f.as_ref().clone())
                    .collect();
                fields.push(date_field());
                Arc::new(Schema::new(fields))
            })
            .collect()
    });
    all()
        .iter()
        .position(|t| t.name == name)
        .and_then(|i| files.get(i).cloned())
        .ok_or_else(|| crate::Error::UnknownTable(name.to_string()))
}

/// Renders docs/tables.md from the catalog.
pub fn markdown() -> String {
    let mut s = String::from(
        "# Tables\n\nGenerated from the catalog (`core/src/catalog`) by `benchlake tables docs`; \
         column names are a public contract.\n\nEvery table is stored as Parquet under \
         `tables/{table}/year=YYYY/month=MM/part-{date}-{run_id}-{job_id}.parquet`. Every \
         file ends with a `date` column (`date32`, the run's UTC day) after the columns below, \
         and `run_id` is the first column; read with `hive_partitioning=true`, `year` and \
         `month` are added from the path. (Lakes written before 2026-12 had \
         `date=…/run_id=…/` directories; the coordinator moves its lake at start, \
         `benchlake tables migrate` an offline one.) A month's small files are merged into \
         `compacted-{first date}-{id}.parquet` beside them, with the same columns: by the \
         coordinator's `compact` jobs in its lake, by `benchlake tables compact` in a lake \
         of offline ingests (docs/configuration.md). Times are seconds (`f64`) unless a name says otherwise; sizes \
         are bytes.\n\n## Node identity\n\nEvery column that names a node (`node_facts.node`, \
         `node_health.node`, `io_task_times.host`, `linktest_ranks.hostname` of netprobe files, \
         `mpi_trace_ranks.node`) holds one name per machine: the Slurm node name where Slurm ran \
         the task, else the agent's node name (its `--name`), else the host name \
         (docs/slurm.md, \"Node identity\"). Rows written before 2026-12 may differ: \
         `node_facts.node` was null outside Slurm (read `coalesce(node, hostname)`, which is \
         the kernel host name for those rows), and netprobe, pio and tracer rows of agent \
         tasks outside Slurm named the kernel host. To join old rows to new ones per node, map \
         each host name to its agent with `benchlake agents list --json` (`name`, `hostname`).\n\n\
         ## Columns added later\n\nColumns are only ever added (marked below where their \
         meaning says \"null in rows written before\"). Files written before a column existed \
         do not have it: read old and new files together with `union_by_name=true` (DuckDB; \
         Spark: `mergeSchema`), which reads the missing column as NULL, e.g. \
         `linktest_timings.from_host`/`to_host` (2026-12). The summary tables \
         (`linktest_host_summary`, `io_node_summary`) have rows only for runs ingested since \
         they exist (docs/linktest.md, \"Last night and one node's history\").\n",
    );
    for t in all() {
        s.push_str(&format!(
            "\n## `{}`\n\n{}\n\n| column | type | null | meaning |\n|---|---|---|---|\n",
            t.name, t.doc
        ));
        for (f, d) in t.schema.fields().iter().zip(&t.column_docs) {
            s.push_str(&format!(
                "| `{}` | {} | {} | {} |\n",
                f.name(),
                type_name(f.data_type()),
                if f.is_nullable() { "yes" } else { "no" },
                d
            ));
        }
    }
    s
}

/// Short, user-facing type name.
pub fn type_name(t: &DataType) -> String {
    match t {
        DataType::Utf8 => "utf8".into(),
        DataType::Int32 => "i32".into(),
        DataType::Int64 => "i64".into(),
        DataType::UInt32 => "u32".into(),
        DataType::UInt64 => "u64".into(),
        DataType::Float64 => "f64".into(),
        DataType::Boolean => "bool".into(),
        DataType::Timestamp(_, _) => "timestamp (µs, UTC)".into(),
        DataType::List(f) => format!("list<{}>", type_name(f.data_type())),
        other => format!("{other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_has_run_id_and_unique_names() {
        let mut names = std::collections::HashSet::new();
        for t in all() {
            assert!(names.insert(t.name), "duplicate table {}", t.name);
            assert_eq!(t.schema.field(0).name(), "run_id", "{}", t.name);
            assert_eq!(t.schema.fields().len(), t.column_docs.len());
            let mut cols = std::collections::HashSet::new();
            for f in t.schema.fields() {
                assert!(cols.insert(f.name()), "{}.{} twice", t.name, f.name());
            }
        }
        // The DESIGN.md §4 contract.
        let linktest = schema("linktest_timings").unwrap();
        let names: Vec<_> = linktest
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        assert_eq!(
            names,
            [
                "run_id",
                "source",
                "permutation",
                "from_rank",
                "to_rank",
                "step",
                "time_s",
                "from_host",
                "to_host"
            ]
        );
        assert!(schema("nope").is_err());
    }
}

#[cfg(test)]
mod docs_tests {
    /// docs/tables.md is generated from the catalog; a changed column must change it.
    #[test]
    fn docs_tables_md_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/tables.md");
        if std::env::var_os("BENCHLAKE_BLESS").is_some() {
            // `BENCHLAKE_BLESS=1 cargo test -p benchlake-core docs_tables`
            // rewrites it (the same text as `benchlake tables docs`).
            std::fs::write(path, super::markdown()).expect("write docs/tables.md");
        }
        let on_disk = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            on_disk == super::markdown(),
            "docs/tables.md is stale: run `benchlake tables docs > docs/tables.md`"
        );
    }
}
