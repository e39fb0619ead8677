//! Analyses: alltoallv communication patterns and statistics, LinkTest health checks.
pub mod linktest_report;
