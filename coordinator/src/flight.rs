//! Arrow Flight over the lake: `ListFlights` lists the tables that have committed
//! files, `GetFlightInfo`/`GetSchema` describe one, and `DoGet` streams it,
//! optionally filtered by run id and date range.
//!
//! A flight is named by a descriptor path `[table]` or by a command holding a JSON
//! [`FlightFilter`]; the ticket is the same JSON. Streamed batches carry the
//! catalog columns plus `date` (Date32), as DuckDB shows them with
//! `hive_partitioning=true`.
use std::pin::Pin;
use std::sync::Arc;

use arrow::array::{ArrayRef, Date32Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::ipc::writer::IpcWriteOptions;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightEndpoint, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaAsIpc, SchemaResult, Ticket,
};
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use tonic::{Request, Response, Status, Streaming};

use crate::Coordinator;
use crate::model::CommittedFile;

/// Which rows of a table a flight carries.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FlightFilter {
    /// Catalog table name.
    pub table: String,
    /// Only this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// First date (inclusive, YYYY-MM-DD).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date_from: Option<String>,
    /// Last date (inclusive, YYYY-MM-DD).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date_to: Option<String>,
}

impl FlightFilter {
    fn check(&self) -> Result<(), Status> {
        if benchlake_core::catalog::get(&self.table).is_none() {
            return Err(Status::not_found(format!(
                "table: no table '{}'",
                self.table
            )));
        }
        for (f, d) in [("date_from", &self.date_from), ("date_to", &self.date_to)] {
            if let Some(d) = d {
                benchlake_core::layout::validate_date(d).map_err(|_| {
                    Status::invalid_argument(format!("{f}: '{d}' is not YYYY-MM-DD"))
                })?;
            }
        }
        Ok(())
    }

    fn matches(&self, f: &CommittedFile) -> bool {
        f.table == self.table
            && self.run_id.as_ref().is_none_or(|r| &f.run_id == r)
            && self
                .date_from
                .as_ref()
                .is_none_or(|d| f.date.as_str() >= d.as_str())
            && self
                .date_to
                .as_ref()
                .is_none_or(|d| f.date.as_str() <= d.as_str())
    }

    fn from_descriptor(d: &FlightDescriptor) -> Result<Self, Status> {
        let f = if !d.cmd.is_empty() {
            serde_json::from_slice::<FlightFilter>(&d.cmd).map_err(|e| {
                Status::invalid_argument(format!("cmd: not a JSON flight filter: {e}"))
            })?
        } else if let Some(t) = d.path.first() {
            FlightFilter {
                table: t.clone(),
                ..Default::default()
            }
        } else {
            return Err(Status::invalid_argument(
                "descriptor: give a path [table] or a JSON cmd",
            ));
        };
        f.check()?;
        Ok(f)
    }
}

/// The schema a flight of `table` streams: catalog columns plus `date`.
pub fn flight_schema(table: &str) -> Result<SchemaRef, Status> {
    let base =
        benchlake_core::catalog::schema(table).map_err(|e| Status::not_found(e.to_string()))?;
    let mut fields: Vec<Field> = base.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new("date", DataType::Date32, false));
    Ok(Arc::new(Schema::new(fields)))
}

/// The Flight service.
#[derive(Clone)]
pub struct FlightSvc(pub Arc<Coordinator>);

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

impl FlightSvc {
    async fn files(&self, f: &FlightFilter) -> Result<Vec<CommittedFile>, Status> {
        // One run's files come from the run's index, not the table's history.
        let (run, table) = (f.run_id.clone(), f.table.clone());
        let all = self
            .0
            .db_read(move |tx| match &run {
                Some(r) => tx.committed_files_of_run(r),
                None => tx.committed_files(Some(&table)),
            })
            .await
            .map_err(Status::from)?;
        Ok(all.into_iter().filter(|x| f.matches(x)).collect())
    }

    async fn info(&self, f: &FlightFilter) -> Result<FlightInfo, Status> {
        let schema = flight_schema(&f.table)?;
        let files = self.files(f).await?;
        let rows: u64 = files.iter().map(|x| x.rows).sum();
        let bytes: u64 = files.iter().map(|x| x.bytes).sum();
        let ticket = serde_json::to_vec(f).map_err(|e| Status::internal(e.to_string()))?;
        FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| Status::internal(e.to_string()))
            .map(|i| {
                i.with_descriptor(FlightDescriptor::new_cmd(ticket.clone()))
                    .with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(ticket)))
                    .with_total_records(rows as i64)
                    .with_total_bytes(bytes as i64)
            })
    }
}

/// Rows per batch DoGet sends.
const FLIGHT_BATCH_ROWS: usize = 16 * 1024;
/// Batches DoGet decodes ahead of the client.
const FLIGHT_QUEUE: usize = 4;

fn days_since_epoch(date: &str) -> i32 {
    chrono::NaiveDate::parse_from_str(date, "%Y-%m-%d")
        .map(|d| (d - chrono::NaiveDate::default()).num_days() as i32)
        .unwrap_or(0)
}

/// The rows of the committed part `f` as a stream: its own object, or its
/// row groups in a merged file; a part merged after the listing (its old
/// object deleted after the grace) is looked up again
/// ([`crate::compaction`]).
async fn part_stream(
    c: &Coordinator,
    f: &CommittedFile,
) -> Result<
    futures::stream::BoxStream<'static, benchlake_core::Result<RecordBatch>>,
    crate::error::CoordError,
> {
    let open = |f: &CommittedFile| {
        let g = f.row_groups().map(|(first, n)| first..first + n);
        let (lake, object) = (c.lake.clone(), f.object().to_string());
        async move {
            lake.parquet_stream_groups(&object, g, FLIGHT_BATCH_ROWS)
                .await
        }
    };
    match open(f).await {
        Ok(s) => Ok(s),
        Err(e) => match crate::compaction::current(c, f).await? {
            Some(now) if now.object() != f.object() => Ok(open(&now).await?),
            _ => Err(e.into()),
        },
    }
}

/// One batch of a committed file with the `date` column (days since the
/// epoch) added, its columns in the order of `schema`.
fn with_date(b: &RecordBatch, day: i32, schema: &SchemaRef) -> Result<RecordBatch, FlightError> {
    let mut cols = catalog_columns(b, schema)?;
    cols.push(Arc::new(Date32Array::from(vec![day; b.num_rows()])));
    RecordBatch::try_new(schema.clone(), cols).map_err(FlightError::Arrow)
}

/// The columns of `b` in the order of `schema` (its last field, `date`, left
/// out). A file written before a nullable column was added to its table
/// (e.g. `runs.logical_at`) reads it as nulls; a file with the columns in
/// order is taken as it is.
fn catalog_columns(b: &RecordBatch, schema: &SchemaRef) -> Result<Vec<ArrayRef>, FlightError> {
    let fields = &schema.fields()[..schema.fields().len().saturating_sub(1)];
    if b.num_columns() == fields.len() {
        return Ok(b.columns().to_vec());
    }
    fields
        .iter()
        .map(|f| match b.column_by_name(f.name()) {
            Some(c) => Ok(c.clone()),
            None if f.is_nullable() => {
                Ok(arrow::array::new_null_array(f.data_type(), b.num_rows()))
            }
            None => Err(FlightError::ProtocolError(format!(
                "a committed file lacks the column '{}'",
                f.name()
            ))),
        })
        .collect()
}

#[tonic::async_trait]
impl FlightService for FlightSvc {
    type HandshakeStream = BoxStream<HandshakeResponse>;
    async fn handshake(
        &self,
        _r: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        Err(Status::unimplemented(
            "handshake: send 'authorization: Bearer <token>' with every call instead",
        ))
    }

    type ListFlightsStream = BoxStream<FlightInfo>;
    async fn list_flights(
        &self,
        _r: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        let tables = self
            .0
            .db_read(|tx| tx.table_totals())
            .await
            .map_err(Status::from)?;
        let mut infos = Vec::new();
        for t in tables.into_iter().map(|t| t.table) {
            infos.push(Ok(self
                .info(&FlightFilter {
                    table: t,
                    ..Default::default()
                })
                .await?));
        }
        Ok(Response::new(Box::pin(futures::stream::iter(infos))))
    }

    async fn get_flight_info(
        &self,
        r: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let f = FlightFilter::from_descriptor(r.get_ref())?;
        Ok(Response::new(self.info(&f).await?))
    }

    async fn poll_flight_info(
        &self,
        _r: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        Err(Status::unimplemented(
            "poll_flight_info: use get_flight_info",
        ))
    }

    async fn get_schema(
        &self,
        r: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        let f = FlightFilter::from_descriptor(r.get_ref())?;
        let schema = flight_schema(&f.table)?;
        let res: SchemaResult = SchemaAsIpc::new(&schema, &IpcWriteOptions::default())
            .try_into()
            .map_err(|e: arrow::error::ArrowError| Status::internal(e.to_string()))?;
        Ok(Response::new(res))
    }

    type DoGetStream = BoxStream<FlightData>;
    async fn do_get(&self, r: Request<Ticket>) -> Result<Response<Self::DoGetStream>, Status> {
        let f: FlightFilter = serde_json::from_slice(&r.get_ref().ticket).map_err(|e| {
            Status::invalid_argument(format!("ticket: not a JSON flight filter: {e}"))
        })?;
        f.check()?;
        let schema = flight_schema(&f.table)?;
        let files = self.files(&f).await?;
        let coord = self.0.clone();
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<RecordBatch, FlightError>>(FLIGHT_QUEUE);
        let sch = schema.clone();
        // One file at a time, read a row group at a time (byte ranges): the
        // stream holds at most one row group's column chunks, the batch being
        // decoded and the channel's FLIGHT_QUEUE batches of FLIGHT_BATCH_ROWS
        // rows, however big the table or a file of it (docs/architecture.md).
        tokio::spawn(async move {
            for file in files {
                let day = days_since_epoch(&file.date);
                let mut batches = match part_stream(&coord, &file).await {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = tx.send(Err(FlightError::ExternalError(Box::new(e)))).await;
                        return;
                    }
                };
                loop {
                    let next = match batches.next().await {
                        None => break,
                        Some(Ok(b)) => with_date(&b, day, &sch),
                        Some(Err(e)) => Err(FlightError::ExternalError(Box::new(e))),
                    };
                    let failed = next.is_err();
                    if tx.send(next).await.is_err() || failed {
                        return;
                    }
                }
            }
        });
        let batches = tokio_stream::wrappers::ReceiverStream::new(rx);
        let stream = FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .build(batches)
            .map(|r| r.map_err(Status::from));
        Ok(Response::new(Box::pin(stream)))
    }

    type DoPutStream = BoxStream<PutResult>;
    async fn do_put(
        &self,
        _r: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        Err(Status::unimplemented(
            "do_put: the lake is written by workers only",
        ))
    }

    type DoExchangeStream = BoxStream<FlightData>;
    async fn do_exchange(
        &self,
        _r: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        Err(Status::unimplemented("do_exchange is not offered"))
    }

    type DoActionStream = BoxStream<arrow_flight::Result>;
    async fn do_action(
        &self,
        _r: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        Err(Status::unimplemented("no actions are offered"))
    }

    type ListActionsStream = BoxStream<ActionType>;
    async fn list_actions(
        &self,
        _r: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        Ok(Response::new(Box::pin(futures::stream::empty())))
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{Array, ListBuilder, StringArray, StringBuilder, TimestampMicrosecondArray};

    use super::*;

    /// A `runs` file of a benchlake before `scheduled_for`/`logical_at`:
    /// every other column, in the order it had.
    fn old_runs_batch() -> RecordBatch {
        let full = benchlake_core::catalog::schema("runs").unwrap();
        let old: Vec<Field> = full
            .fields()
            .iter()
            .filter(|f| !matches!(f.name().as_str(), "scheduled_for" | "logical_at"))
            .map(|f| f.as_ref().clone())
            .collect();
        let ts = || {
            Arc::new(TimestampMicrosecondArray::from(vec![Some(1_000_000i64)]).with_timezone("UTC"))
                as ArrayRef
        };
        let s = |v: Option<&str>| Arc::new(StringArray::from(vec![v])) as ArrayRef;
        let mut agents = ListBuilder::new(StringBuilder::new());
        agents.values().append_value("a1");
        agents.append(true);
        let cols: Vec<ArrayRef> = old
            .iter()
            .map(|f| match f.name().as_str() {
                "submitted_at" | "started_at" | "finished_at" => ts(),
                "agents" => Arc::new(agents.finish_cloned()) as ArrayRef,
                "schedule_id" | "error" | "verdict" => s(None),
                _ => s(Some("x")),
            })
            .collect();
        RecordBatch::try_new(Arc::new(Schema::new(old)), cols).unwrap()
    }

    #[test]
    fn a_runs_file_older_than_its_new_columns_reads_them_as_nulls() {
        let schema = flight_schema("runs").unwrap();
        let cols = catalog_columns(&old_runs_batch(), &schema).unwrap();
        assert_eq!(cols.len() + 1, schema.fields().len(), "all but date");
        for name in ["scheduled_for", "logical_at"] {
            let i = schema.index_of(name).unwrap();
            assert_eq!(cols[i].null_count(), 1, "{name}");
        }
        let i = schema.index_of("submitted_at").unwrap();
        assert_eq!(cols[i].null_count(), 0);
        let b = with_date(&old_runs_batch(), days_since_epoch("2026-12-06"), &schema).unwrap();
        assert_eq!(b.num_rows(), 1);
        assert_eq!(b.schema(), schema);
    }
}
