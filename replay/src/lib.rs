//! Discrete-event replay engine with the Bandela and Dimemas network models.
//!
//! * [`event`] — the discrete-event core (deterministic priority queue);
//! * [`dimemas`] — the Dimemas 5.5 model over `.dim` traces;
//! * [`result`] — what a replay produces, whatever the model;
//! * [`models`] — the model registry (names, trace kinds, parameter checks);
//! * [`api`] — [`run_replay`], the entry point a worker job calls;
//! * [`calibrate`] — model parameters fitted from the cluster's pair measurements;
//! * [`calibrations`] — calibrations in the lake: stored, found, applied.
pub mod api;
pub mod bandela;
pub mod calibrate;
pub mod calibrations;
pub mod dimemas;
pub mod error;
pub mod event;
pub mod models;
pub mod result;
mod source;
pub mod synth;
pub mod tables;

pub use api::{run_replay, sweep_points};
pub use error::{ReplayError, Result};
pub use result::{CommTimes, RankResult, ReplayResult};
pub use tables::{ReplayMeta, replay_tables};
