//! Analyses: alltoallv communication patterns and statistics, LinkTest health checks.

pub mod changepoint;
pub mod counts;
pub mod io_checks;
pub mod link_checks;
pub mod linktest_checks;
pub mod linktest_lake;
pub mod linktest_report;
pub mod node_checks;
pub mod osu_checks;
pub mod reference;
pub mod regressions;
pub mod summaries;
