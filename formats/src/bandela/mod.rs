//! Bandela inputs: the text trace (one file per rank, [`trace`]; also the manual's
//! `format_event` layout), the replaympi input language ([`input`]), the tracer's
//! rank map ([`ranks`]) and the `bandela` ingest kind ([`ingest`]).
pub mod ingest;
pub mod input;
pub mod ranks;
pub mod trace;

pub use input::BandelaInput;
pub use trace::{BRecord, Kernel, RankTrace};
