//! Tests of the SQLite store (store.rs): job groups and the run list's pages.

mod group_tests {
    use crate::store::*;

    #[test]
    fn an_old_database_gains_the_job_group_columns() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        {
            // A database as created before job groups existed.
            let c = Connection::open(&path).unwrap();
            c.execute_batch(SCHEMA).unwrap();
            // Release 1 wrote version "1".
            c.execute("INSERT INTO meta(k, v) VALUES ('schema_version', '1')", [])
                .unwrap();
            c.execute(
                "INSERT INTO jobs(job_id, run_id, kind, state, not_before_ms, created_ms, data)
                 VALUES ('j1', 'r1', 'ingest', 'DONE', 0, 0, '{}')",
                [],
            )
            .unwrap();
        }
        for _ in 0..2 {
            // Opening twice: the migration is idempotent.
            let s: Box<dyn StateStore> = Box::new(SqliteStore::open(&path).unwrap());
            let s: &dyn StateStore = s.as_ref();
            let (g, w) = s.transact(|tx| tx.job_group("j1")).unwrap();
            assert_eq!((g, w), (None, None));
            s.transact(|tx| {
                tx.set_job_group("j1", Some("parts"), None)?;
                assert_eq!(tx.open_jobs_in_group("r1", "parts")?, 0);
                tx.job_group("j1")
            })
            .map(|(g, _)| assert_eq!(g.as_deref(), Some("parts")))
            .unwrap();
            s.transact(|tx| tx.set_job_group("j1", None, None)).unwrap();
        }
        let c = Connection::open(&path).unwrap();
        let n: i64 = c
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE type='index' AND name IN ('jobs_group','jobs_wait')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 2);
        let v: String = c
            .query_row("SELECT v FROM meta WHERE k='schema_version'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION.to_string());
        // A newer database is refused, untouched.
        c.execute("UPDATE meta SET v='99' WHERE k='schema_version'", [])
            .unwrap();
        drop(c);
        let e = SqliteStore::open(&path).unwrap_err().to_string();
        assert!(e.contains("schema version 99"), "{e}");
    }
}

mod run_page_tests {
    //! `list_runs` reads a page from an index, however long the history.
    use crate::store::*;
    use benchlake_core::bench::LauncherKind;
    use rusqlite::StatementStatus;

    fn run(i: usize, state: RunState, schedule: Option<&str>, bench: &str) -> RunRow {
        RunRow {
            run_id: format!("r{i:06}"),
            schedule_id: schedule.map(String::from),
            benchmark: bench.into(),
            kind: "noop".into(),
            state,
            spec: Spec {
                benchmark: bench.into(),
                params: Default::default(),
                nodes: Nodes::default(),
                launcher: LauncherKind::Local,
                max_attempts: 3,
                timeout_s: 60,
                slurm: Default::default(),
            },
            submitted_at_ms: i as i64,
            started_at_ms: None,
            finished_at_ms: None,
            scheduled_for_ms: None,
            error: None,
            idempotency_key: None,
            rerun_of: None,
            date: "2026-12-07".into(),
            outcome: None,
            queued: false,
            notify: Vec::new(),
            owner: None,
        }
    }

    /// 10,000 runs: the first 3 RUNNING, the first 5 of schedule `old`,
    /// every 4th of `nightly`, every 2nd a `hostinfo`; the rest SUCCEEDED
    /// ad-hoc `sleep` runs. Every filter that selects few runs (a state, a
    /// schedule whose runs are all old) would walk the whole history without
    /// an index ending in `run_id`.
    #[test]
    fn run_pages_come_from_an_index_with_10000_runs() {
        let store = SqliteStore::in_memory().unwrap();
        let s: &dyn StateStore = &store;
        s.transact(|tx| {
            for i in 0..10_000 {
                let state = if i < 3 {
                    RunState::Running
                } else {
                    RunState::Succeeded
                };
                let sched = if i < 5 {
                    Some("old")
                } else if i % 4 == 0 {
                    Some("nightly")
                } else {
                    None
                };
                let bench = if i % 2 == 0 { "hostinfo" } else { "sleep" };
                tx.insert_run(&run(i, state, sched, bench))?;
            }
            Ok(())
        })
        .unwrap();
        let f = |schedule: Option<&str>, state: Option<RunState>, bench: Option<&str>, limit| {
            RunFilter {
                schedule_id: schedule.map(String::from),
                state,
                benchmark: bench.map(String::from),
                limit,
                before: None,
            }
        };
        let cases = [
            (f(None, None, None, 0), 100, "r009999"),
            (f(Some("old"), None, None, 1), 1, "r000004"),
            (f(Some("nightly"), None, None, 100), 100, "r009996"),
            (f(None, Some(RunState::Running), None, 100), 3, "r000002"),
            (f(None, Some(RunState::Pending), None, 100), 0, ""),
            (f(None, None, Some("hostinfo"), 10), 10, "r009998"),
            (
                f(Some("old"), Some(RunState::Running), None, 100),
                3,
                "r000002",
            ),
        ];
        for (filter, n, first) in cases {
            let rows = s.transact(|tx| tx.list_runs(&filter)).unwrap();
            assert_eq!(rows.len(), n, "{filter:?}");
            assert_eq!(
                rows.first().map(|r| r.run_id.as_str()).unwrap_or(""),
                first,
                "{filter:?}"
            );
            assert!(rows.windows(2).all(|w| w[0].run_id > w[1].run_id));
            // The statement list_runs ran (cached by its text): how many
            // virtual machine steps it took. Walking the history costs
            // more than 10 steps per run (> 100,000); a page from an index
            // about 20 per row returned.
            let (sql, args) = filter.sql(|n| format!("?{n}"));
            let c = store.conn.lock().unwrap();
            let st = c.prepare_cached(&sql).unwrap();
            let steps = st.get_status(StatementStatus::VmStep);
            assert!(steps > 0, "list_runs did not run `{sql}`");
            assert!(
                steps < 50 * (n as i32 + 10),
                "{filter:?}: {steps} steps for {n} rows: `{sql}` walks the history"
            );
            let plan: Vec<String> = c
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .unwrap()
                .query_map(
                    rusqlite::params_from_iter(
                        args.iter().map(|a| a.to_string()).chain(["10".to_string()]),
                    ),
                    |r| r.get::<_, String>(3),
                )
                .unwrap()
                .collect::<std::result::Result<_, _>>()
                .unwrap();
            assert!(
                !plan.iter().any(|p| p.contains("TEMP B-TREE")),
                "{filter:?} sorts: {plan:?}"
            );
        }
        // Paging on: the page after the first one of `nightly`.
        let page = s
            .transact(|tx| {
                tx.list_runs(&RunFilter {
                    schedule_id: Some("nightly".into()),
                    limit: 2,
                    before: Some("r009996".into()),
                    ..Default::default()
                })
            })
            .unwrap();
        let ids: Vec<&str> = page.iter().map(|r| r.run_id.as_str()).collect();
        assert_eq!(ids, ["r009992", "r009988"]);
    }
}
