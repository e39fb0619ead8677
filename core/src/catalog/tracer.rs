//! Tables of traced runs (docs/tracer.md): measured communication from the
//! tracer's statistics file next to the default replay's model, and where
//! each rank ran (`mpi_trace_ranks`, from the tracer's `bandela_ranks` file).
use arrow::datatypes::DataType::*;

use super::*;

/// Tracer tables.
pub fn tables() -> Vec<TableDef> {
    vec![
        table(
            "mpi_trace_ranks",
            "One row per rank of a traced MPI run: the host and node it ran on (the tracer's `bandela_ranks` file, read by the `bandela` ingest).",
            vec![
                run_id(),
                source(),
                ("rank", Int32, false, "rank (MPI_COMM_WORLD)"),
                (
                    "hostname",
                    utf8(),
                    false,
                    "the rank's host name (gethostname)",
                ),
                (
                    "node",
                    utf8(),
                    false,
                    "the rank's node: the Slurm node name (SLURMD_NODENAME) when set, else the agent's node name (BENCHLAKE_NODE), else the host name",
                ),
            ],
        ),
        table(
            "trace_comparison",
            "Measured (tracer statistics) vs modelled (default replay) communication of a traced run, per rank and MPI routine, plus one `all` row per rank.",
            vec![
                run_id(),
                (
                    "replay_id",
                    utf8(),
                    false,
                    "the default replay compared (replays.replay_id)",
                ),
                (
                    "model",
                    utf8(),
                    false,
                    "replay model (`bandela` or `dimemas`)",
                ),
                ("rank", Int32, false, "rank (MPI_COMM_WORLD)"),
                (
                    "function",
                    utf8(),
                    false,
                    "MPI routine (`MPI_Send`, `MPI_Bcast` ...), or `all` for the rank's total",
                ),
                (
                    "calls",
                    Int64,
                    false,
                    "measured calls of the routine (all: of every routine)",
                ),
                (
                    "measured_comm_s",
                    Float64,
                    false,
                    "measured time inside the routine's calls (bandela_stats request times); all: the rank's measured communication = Wait + Latency + Transfer of bandela_stats",
                ),
                (
                    "modelled_comm_s",
                    Float64,
                    false,
                    "modelled communication: wait + latency + small + big transfer of replay_functions (0 when the replay has no such routine); all: replay_ranks.communication_s. The Dimemas trace format has one kind of wait record for `MPI_Wait`, `MPI_Waitall`, `MPI_Waitany` and `MPI_Waitsome`, and the Dimemas model charges it to `MPI_Wait`: on a rank that called exactly one of the other three and never `MPI_Wait`, that routine's row carries it (no separate `MPI_Wait` row)",
                ),
                (
                    "diff_s",
                    Float64,
                    false,
                    "modelled_comm_s - measured_comm_s",
                ),
                (
                    "ratio",
                    Float64,
                    true,
                    "modelled_comm_s / measured_comm_s (null when nothing was measured)",
                ),
                (
                    "measured_comp_s",
                    Float64,
                    false,
                    "measured computation just before the routine's calls; all: the rank's measured computation (Comput of bandela_stats)",
                ),
                (
                    "modelled_comp_s",
                    Float64,
                    true,
                    "all: replay_ranks.computation_s (null on routine rows)",
                ),
                (
                    "stats_source",
                    utf8(),
                    false,
                    "raw key of the bandela_stats file",
                ),
                (
                    "measured_total_s",
                    Float64,
                    true,
                    "all: the rank's measured time in the traced window (Comput + Wait + Latency + Transfer of bandela_stats); the run's measured time is the largest (null on routine rows)",
                ),
                (
                    "modelled_total_s",
                    Float64,
                    true,
                    "all: the rank's predicted total (replay_ranks.total_s); the run's predicted time is the largest (null on routine rows)",
                ),
            ],
        ),
    ]
}
