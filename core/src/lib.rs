//! benchlake core: the pieces every service and format shares.
//!
//! - [`ids`]: run/task/job ids (ULIDs) and their validation;
//! - [`clock`]: the `Clock` trait, so cron, leases and retries can be tested on a paused clock;
//! - [`layout`]: object-store keys (`raw/`, `tables/`, `_staging/`), built only here;
//! - [`catalog`]: the Arrow schema of every lake table (a public contract, see docs/tables.md);
//! - [`lake`]: Parquet encoding, the object store handle and offline lake writing;
//! - [`node`]: a node's identity (Slurm node, else the agent's node, else the host name);
//! - [`hostlist`]: Slurm hostlist expressions (`n[1-4]`) expanded into node names;
//! - [`scontrol`]: reading, draining and resuming Slurm nodes (argv, checked names);
//! - [`stdout`]: printing that ends quietly, not with a panic, when standard output is closed;
//! - [`error`]: the crate's error type.
pub mod bench;
pub mod catalog;
pub mod clock;
pub mod error;
pub mod hostlist;
pub mod ids;
pub mod jobs;
pub mod lake;
pub mod layout;
pub mod limits;
pub mod mem;
pub mod node;
pub mod scontrol;
pub mod slurm;
pub mod stdout;
pub mod threads;
pub mod verdict;

pub use error::{Error, Result};
