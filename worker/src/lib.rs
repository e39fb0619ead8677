//! The worker: job leasing, executors (ingest, analyze, replay), Parquet staging.
