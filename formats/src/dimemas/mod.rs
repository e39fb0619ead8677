//! Dimemas inputs: `.dim` traces ([`trace`]), `.cfg` platform configurations and the
//! collectives definition file ([`config`]), and the `dimemas` ingest kind that turns a
//! trace into `mpi_trace_records` rows ([`ingest`]).
//!
//! The formats are the ones Dimemas 5.5 reads (see `docs/replay.md` for the fields,
//! the choices made where Dimemas is silent, and what is rejected).
pub mod config;
pub mod ingest;
mod text;
pub mod trace;

pub use config::{CollectiveDef, CollectivesFile, DimConfig, GopModel, GopSize, NodeConfig};
pub use trace::{DimHeader, DimRecord, DimTrace, TaskCursor, TaskStream};
