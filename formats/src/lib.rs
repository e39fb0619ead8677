//! Readers of the raw formats benchlake ingests. Every reader yields Arrow
//! `RecordBatch`es of catalog tables (see `benchlake_core::catalog`) and never
//! panics on bad input: errors name the file, the field and the byte offset (or
//! line and column for text formats).
//!
//! [`ingest`] is the one entry point used by the CLI (`benchlake ingest KIND`) and
//! by the worker's ingest executor; each format declares its kind in [`kinds`]
//! (reader, tables, checks, follow-up jobs).
pub mod bandela;
pub mod counts;
pub mod dimemas;
pub mod error;
pub mod hostinfo;
pub mod ingest;
pub mod io;
pub mod kinds;
pub mod linktest;
pub mod osu;
pub mod sion;

pub use error::{FormatError, Result};
pub use ingest::{IngestContext, InputFile, ingest, ingest_encoded, ingest_encoded_in, kinds};
