//! Analyses: alltoallv communication patterns and statistics, LinkTest health checks.
