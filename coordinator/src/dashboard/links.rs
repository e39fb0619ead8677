//! Failing links on the dashboard: the `link_health` rows (docs/verdicts.md,
//! "Links") of a LinkTest or netprobe run on its run page, and those naming a
//! node on the node's page. Only failing links have rows, so both reads stay
//! small: a run's own file, and for a node the newest
//! [`NODE_LINK_FILES`] files of the table.
use std::fmt::Write;

use arrow::array::{Array, Float64Array, RecordBatch, StringArray};

use super::html::{self, badge, esc};
use super::pages::run_link;
use crate::model::CommittedFile;

/// Newest `link_health` files a node's page reads.
pub const NODE_LINK_FILES: usize = 30;
/// Rows a table shows before it says how many more there are.
pub const SHOWN: usize = 200;

/// One failing link of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkRow {
    pub run_id: String,
    pub node_a: String,
    pub node_b: String,
    pub status: String,
    pub value: Option<f64>,
    pub reference: Option<f64>,
    pub unit: String,
    pub message: String,
}

impl LinkRow {
    /// How much slower than its usual the link was (1.2 = 20 % slower).
    fn ratio(&self) -> f64 {
        match (self.value, self.reference) {
            (Some(v), Some(r)) if r > 0.0 && v.is_finite() => v / r,
            _ => f64::NAN,
        }
    }
}

fn text<'a>(b: &'a RecordBatch, n: &str) -> Option<&'a StringArray> {
    b.column_by_name(n)?.as_any().downcast_ref::<StringArray>()
}

fn num<'a>(b: &'a RecordBatch, n: &str) -> Option<&'a Float64Array> {
    b.column_by_name(n)?.as_any().downcast_ref::<Float64Array>()
}

/// The rows of decoded `link_health` batches; a batch without the table's
/// columns is an error naming the column (a file the catalog did not write).
pub fn rows_of(batches: &[RecordBatch], run_id: &str) -> Result<Vec<LinkRow>, String> {
    let mut out = Vec::new();
    for b in batches {
        let col = |n: &str| text(b, n).ok_or_else(|| format!("link_health: no text column '{n}'"));
        let (a, bb, status, unit, message) = (
            col("node_a")?,
            col("node_b")?,
            col("status")?,
            col("unit")?,
            col("message")?,
        );
        let (value, reference) = (num(b, "value"), num(b, "reference"));
        let f =
            |c: Option<&Float64Array>, i: usize| c.filter(|c| c.is_valid(i)).map(|c| c.value(i));
        for i in 0..b.num_rows() {
            out.push(LinkRow {
                run_id: run_id.to_string(),
                node_a: a.value(i).to_string(),
                node_b: bb.value(i).to_string(),
                status: status.value(i).to_string(),
                value: f(value, i),
                reference: f(reference, i),
                unit: unit.value(i).to_string(),
                message: message.value(i).to_string(),
            });
        }
    }
    Ok(out)
}

/// The failing links of one run, from its committed `link_health` files.
pub async fn of_run(
    lake: &benchlake_core::lake::Lake,
    run_id: &str,
    files: &[CommittedFile],
) -> Result<Vec<LinkRow>, String> {
    let mut out = Vec::new();
    for f in files.iter().filter(|f| f.table == "link_health") {
        let batches = lake
            .read_part(f.object(), f.row_groups(), &f.run_id)
            .await
            .map_err(|e| e.to_string())?;
        out.extend(rows_of(&batches, run_id).map_err(|e| format!("{}: {e}", f.key))?);
    }
    sort(&mut out);
    Ok(out)
}

/// The failing links naming `node` in the newest [`NODE_LINK_FILES`]
/// committed `link_health` files, newest run first.
pub async fn of_node(c: &crate::Coordinator, node: &str) -> Result<Vec<LinkRow>, String> {
    let mut files = c
        .db_read(|tx| tx.committed_files(Some("link_health")))
        .await
        .map_err(|e| e.to_string())?;
    files.sort_by(|a, b| {
        b.committed_ms
            .cmp(&a.committed_ms)
            .then_with(|| b.key.cmp(&a.key))
    });
    let mut out = Vec::new();
    for f in files.iter().take(NODE_LINK_FILES) {
        let batches = crate::compaction::read_committed(c, f)
            .await
            .map_err(|e| e.to_string())?;
        let mut rows = rows_of(&batches, &f.run_id).map_err(|e| format!("{}: {e}", f.key))?;
        rows.retain(|r| r.node_a == node || r.node_b == node);
        sort(&mut rows);
        out.extend(rows);
    }
    Ok(out)
}

/// Slowest against its usual first; rows without a ratio last.
fn sort(rows: &mut [LinkRow]) {
    rows.sort_by(|a, b| {
        let (ra, rb) = (a.ratio(), b.ratio());
        rb.partial_cmp(&ra)
            .unwrap_or_else(|| ra.is_nan().cmp(&rb.is_nan()))
            .then_with(|| (&a.node_a, &a.node_b).cmp(&(&b.node_a, &b.node_b)))
    });
}

fn node_cell(n: &str) -> String {
    format!(
        "<a href=\"/nodes/{}\">{}</a>",
        esc(&html::url_encode(n)),
        esc(n)
    )
}

/// A table of failing links (`id` its element id); with `runs`, a column
/// links each row's run. At most [`SHOWN`] rows, then how many more.
pub fn table(rows: &[LinkRow], id: &str, runs: bool) -> String {
    let mut b = String::new();
    let _ = write!(
        b,
        "<table id=\"{id}\"><thead><tr>{}<th>link</th><th>status</th><th class=\"num\">time</th><th class=\"num\">usual</th><th class=\"num\">vs usual</th><th>message</th></tr></thead><tbody>",
        if runs { "<th>run</th>" } else { "" }
    );
    for r in rows.iter().take(SHOWN) {
        let ratio = r.ratio();
        let _ = write!(
            b,
            "<tr>{}<td class=\"link\">{} – {}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num ratio\">{}</td><td>{}</td></tr>",
            if runs {
                format!("<td>{}</td>", run_link(&r.run_id))
            } else {
                String::new()
            },
            node_cell(&r.node_a),
            node_cell(&r.node_b),
            badge(&r.status),
            esc(&html::figure(r.value, &r.unit)),
            esc(&html::figure(r.reference, &r.unit)),
            if ratio.is_finite() {
                format!("{:+.0} %", (ratio - 1.0) * 100.0)
            } else {
                "—".into()
            },
            esc(&r.message)
        );
    }
    b.push_str("</tbody></table>");
    if rows.len() > SHOWN {
        let _ = write!(
            b,
            "<p class=\"muted\">{} more failing links; query the <span class=\"mono\">link_health</span> table for all of them (docs/verdicts.md).</p>",
            rows.len() - SHOWN
        );
    }
    b
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn batch(rows: &[(&str, &str, f64, f64)]) -> RecordBatch {
        let s = |v: Vec<&str>| Arc::new(StringArray::from(v)) as Arc<dyn Array>;
        let n = rows.len();
        let schema = Schema::new(
            ["node_a", "node_b", "status", "unit", "message"]
                .iter()
                .map(|c| Field::new(*c, DataType::Utf8, false))
                .chain(
                    ["value", "reference"]
                        .iter()
                        .map(|c| Field::new(*c, DataType::Float64, true)),
                )
                .collect::<Vec<_>>(),
        );
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                s(rows.iter().map(|r| r.0).collect()),
                s(rows.iter().map(|r| r.1).collect()),
                s(vec!["FAIL"; n]),
                s(vec!["s"; n]),
                s(vec!["<slow>"; n]),
                Arc::new(Float64Array::from(
                    rows.iter().map(|r| r.2).collect::<Vec<_>>(),
                )),
                Arc::new(Float64Array::from(
                    rows.iter().map(|r| r.3).collect::<Vec<_>>(),
                )),
            ],
        )
        .unwrap()
    }

    #[test]
    fn failing_links_list_slowest_first_with_both_nodes_linked_and_escaped() {
        let mut rows = rows_of(
            &[batch(&[
                ("n1", "n2", 3.3e-6, 3.0e-6),
                ("n3", "n4", 6.0e-6, 3.0e-6),
            ])],
            "R1",
        )
        .unwrap();
        sort(&mut rows);
        assert_eq!(
            (rows[0].node_a.as_str(), rows[0].node_b.as_str()),
            ("n3", "n4")
        );
        let t = table(&rows, "links", false);
        assert!(
            t.contains("href=\"/nodes/n3\"") && t.contains("href=\"/nodes/n4\""),
            "{t}"
        );
        assert!(t.contains("+100 %") && t.contains("+10 %"), "{t}");
        assert!(t.contains("3.000 µs") || t.contains("µs"), "{t}");
        assert!(t.contains("&lt;slow&gt;") && !t.contains("<slow>"), "{t}");
        assert!(t.find("n3").unwrap() < t.find("n1").unwrap());
        let with_runs = table(&rows, "node-links", true);
        assert!(with_runs.contains("/runs/R1"), "{with_runs}");
    }

    #[test]
    fn a_file_without_the_columns_is_an_error_naming_the_column() {
        let b = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("x", DataType::Utf8, false)])),
            vec![Arc::new(StringArray::from(vec!["a"]))],
        )
        .unwrap();
        let e = rows_of(&[b], "R").unwrap_err();
        assert!(e.contains("node_a"), "{e}");
    }

    #[test]
    fn more_rows_than_shown_say_how_many_are_left() {
        let many: Vec<(String, String)> = (0..SHOWN + 5)
            .map(|i| (format!("a{i}"), format!("b{i}")))
            .collect();
        let rows: Vec<LinkRow> = many
            .iter()
            .map(|(a, b)| LinkRow {
                run_id: "R".into(),
                node_a: a.clone(),
                node_b: b.clone(),
                status: "FAIL".into(),
                value: Some(2.0),
                reference: Some(1.0),
                unit: "s".into(),
                message: String::new(),
            })
            .collect();
        let t = table(&rows, "links", false);
        assert!(t.contains("5 more failing links"), "{t}");
        assert_eq!(t.matches("<tr>").count(), SHOWN + 1);
    }
}
