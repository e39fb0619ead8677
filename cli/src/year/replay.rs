//! A scenario's nights through the real ingest, checks and record jobs
//! (the worker's executors, run in this process against a local lake; see
//! `benchlake_worker::local`), collecting every verdict row.
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use arrow::array::{Array, RecordBatch, StringArray};
use benchlake_core::ids::new_id_at;
use benchlake_core::jobs::{CHECKS_JOB, IngestRunInfo, IngestSpec, RecordSpec, ingest_spec_json};
use benchlake_core::lake::{Lake, TableOutput};
use benchlake_core::layout;
use benchlake_worker::local::{self, LocalJob};

use super::synth::World;

/// What a run of the night measured: the schedule it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Subject {
    Hostinfo,
    /// pio on the filesystem.
    Pio(String),
    Linktest,
}

impl Subject {
    pub fn benchmark(&self) -> &'static str {
        match self {
            Subject::Hostinfo => "hostinfo",
            Subject::Pio(_) => "pio",
            Subject::Linktest => "linktest",
        }
    }
}

/// One verdict row of a night.
#[derive(Debug, Clone)]
pub struct Verdict {
    pub night: usize,
    pub subject: Subject,
    /// The node (`node_health`), the link `a:b` (`link_health`), or None for a
    /// run-level `checks` row.
    pub target: Option<String>,
    pub check: String,
    pub status: String,
    pub message: String,
}

/// Seconds spent per stage, summed over the jobs (which run on several
/// threads: the sum can exceed the time it took).
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Timings {
    pub generate_s: f64,
    pub ingest_s: f64,
    pub checks_s: f64,
    pub record_s: f64,
}

impl Timings {
    fn add(&mut self, o: &Timings) {
        self.generate_s += o.generate_s;
        self.ingest_s += o.ingest_s;
        self.checks_s += o.checks_s;
        self.record_s += o.record_s;
    }
}

/// The replay of one scenario.
pub struct Replay {
    pub world: World,
    lake: Lake,
    rt: tokio::runtime::Runtime,
    scratch: tempfile::TempDir,
    schedules: Vec<(Subject, String)>,
    /// The rows that are not PASS.
    pub verdicts: Vec<Verdict>,
    /// Rows per status.
    pub statuses: BTreeMap<String, u64>,
    pub timings: Timings,
    /// Node-nights measured (a node in the night's runs).
    pub node_nights: u64,
    /// Runs of a night replayed at once.
    pub jobs: usize,
}

fn text(b: &RecordBatch, name: &str) -> Option<StringArray> {
    b.column_by_name(name)
        .and_then(|a| a.as_any().downcast_ref::<StringArray>().cloned())
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

impl Replay {
    /// A replay writing into the lake at `dir`.
    pub fn new(world: World, dir: &Path) -> anyhow::Result<Replay> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let lake = Lake::local(dir)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let scratch = tempfile::Builder::new()
            .prefix("probe-year-")
            .tempdir()
            .context("scratch directory")?;
        let t0 = world.night_ms(0);
        let mut subjects = vec![Subject::Hostinfo, Subject::Linktest];
        subjects.extend(world.s.filesystems.iter().cloned().map(Subject::Pio));
        let schedules = subjects
            .into_iter()
            .enumerate()
            .map(|(k, s)| (s, new_id_at(t0 - 86_400_000 + k as i64)))
            .collect();
        Ok(Replay {
            world,
            lake,
            rt,
            scratch,
            schedules,
            verdicts: Vec::new(),
            statuses: BTreeMap::new(),
            timings: Timings::default(),
            node_nights: 0,
            jobs: 1,
        })
    }

    /// Runs every night of the scenario; `progress` is called after each.
    /// With more than one job the hostinfo runs go ahead on a thread of
    /// their own ([`Self::pipelined`]).
    pub fn run(&mut self, mut progress: impl FnMut(usize, &Timings)) -> anyhow::Result<()> {
        if self.jobs > 1 {
            return self.pipelined(progress);
        }
        for night in 0..self.world.s.nights {
            self.night(night)?;
            progress(night, &self.timings);
        }
        Ok(())
    }

    /// The nights with the hostinfo chain one thread ahead: night N's
    /// LinkTest and pio runs start once night N's hostinfo has landed (their
    /// checks read its facts: a machine-wide busy night), while night N+1's
    /// hostinfo runs beside them (it reads only the hostinfo schedule's own
    /// history), as a worker with several job slots would run them. The
    /// verdicts are the same as night by night; only the time differs.
    fn pipelined(&mut self, mut progress: impl FnMut(usize, &Timings)) -> anyhow::Result<()> {
        let nights = self.world.s.nights;
        let schedules = self.schedules.clone();
        let (first, rest): (Vec<_>, Vec<_>) = schedules
            .iter()
            .enumerate()
            .partition(|(_, (subject, _))| matches!(subject, Subject::Hostinfo));
        let jobs = self.jobs.clamp(1, rest.len().max(1));
        let (mut verdicts, mut statuses, mut timings, mut node_nights) = (
            Vec::new(),
            BTreeMap::<String, u64>::new(),
            self.timings.clone(),
            0u64,
        );
        let me = &*self;
        type Outs = Vec<(usize, anyhow::Result<RunOut>)>;
        let result = std::thread::scope(|sc| -> anyhow::Result<()> {
            // At most two nights of hostinfo ahead.
            let (tx, rx) = std::sync::mpsc::sync_channel::<(usize, Outs)>(2);
            let first = &first;
            sc.spawn(move || {
                for night in 0..nights {
                    let outs: Outs = first
                        .iter()
                        .map(|&(slot, (subject, schedule))| {
                            (slot, me.subject_run(night, slot, subject, schedule))
                        })
                        .collect();
                    if tx.send((night, outs)).is_err() {
                        break; // the nights stopped on an error
                    }
                }
            });
            for night in 0..nights {
                let (n, mut outs) = rx
                    .recv()
                    .map_err(|_| anyhow::anyhow!("the hostinfo replay thread stopped"))?;
                anyhow::ensure!(n == night, "hostinfo of night {n} came for night {night}");
                node_nights += me.world.present_nodes(night).len() as u64;
                outs.extend(me.on_lanes(night, &rest, jobs));
                outs.sort_by_key(|(slot, _)| *slot);
                for (_, o) in outs {
                    let o = o?;
                    verdicts.extend(o.verdicts);
                    for (k, v) in o.statuses {
                        *statuses.entry(k).or_default() += v;
                    }
                    timings.add(&o.timings);
                }
                progress(night, &timings);
            }
            Ok(())
        });
        self.verdicts.extend(verdicts);
        for (k, v) in statuses {
            *self.statuses.entry(k).or_default() += v;
        }
        self.timings = timings;
        self.node_nights += node_nights;
        result
    }

    /// The night's runs: hostinfo first (its facts land before the other
    /// runs are checked: a machine-wide busy night holds their FAILs), then
    /// LinkTest and pio on each filesystem on `self.jobs` threads (a worker's
    /// job slots: those runs of one night are independent; the nights are
    /// not, and stay in order).
    fn night(&mut self, night: usize) -> anyhow::Result<()> {
        self.node_nights += self.world.present_nodes(night).len() as u64;
        let schedules = self.schedules.clone();
        let (first, rest): (Vec<_>, Vec<_>) = schedules
            .iter()
            .enumerate()
            .partition(|(_, (subject, _))| matches!(subject, Subject::Hostinfo));
        let jobs = self.jobs.clamp(1, rest.len().max(1));
        let me = &*self;
        let mut outs: Vec<(usize, anyhow::Result<RunOut>)> = first
            .iter()
            .map(|&(slot, (subject, schedule))| {
                (slot, me.subject_run(night, slot, subject, schedule))
            })
            .collect();
        outs.extend(me.on_lanes(night, &rest, jobs));
        outs.sort_by_key(|(slot, _)| *slot);
        for (_, o) in outs {
            let o = o?;
            self.verdicts.extend(o.verdicts);
            for (k, v) in o.statuses {
                *self.statuses.entry(k).or_default() += v;
            }
            self.timings.add(&o.timings);
        }
        Ok(())
    }

    /// The night's runs `rest` on `jobs` threads (a worker's job slots),
    /// each with its slot.
    fn on_lanes(
        &self,
        night: usize,
        rest: &[(usize, &(Subject, String))],
        jobs: usize,
    ) -> Vec<(usize, anyhow::Result<RunOut>)> {
        std::thread::scope(|sc| {
            let handles: Vec<_> = (0..jobs)
                .map(|lane| {
                    sc.spawn(move || {
                        rest.iter()
                            .enumerate()
                            .filter(|(i, _)| i % jobs == lane)
                            .map(|(_, &(slot, (subject, schedule)))| {
                                (slot, self.subject_run(night, slot, subject, schedule))
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| {
                    h.join().unwrap_or_else(|_| {
                        vec![(usize::MAX, Err(anyhow::anyhow!("a replay thread panicked")))]
                    })
                })
                .collect()
        })
    }

    /// One run of the night, generated and replayed.
    fn subject_run(
        &self,
        night: usize,
        slot: usize,
        subject: &Subject,
        schedule: &str,
    ) -> anyhow::Result<RunOut> {
        let t = Instant::now();
        let (format, files, params) = self.raw(night, subject)?;
        let generate_s = secs(t.elapsed());
        let mut o = self
            .run_one(night, slot, subject, schedule, format, files, params)
            .with_context(|| {
                format!(
                    "night {night} ({}), {}",
                    self.world.date(night),
                    subject.benchmark()
                )
            })?;
        o.timings.generate_s += generate_s;
        Ok(o)
    }

    /// The raw files of one run: (ingest format, files, run parameters).
    #[allow(clippy::type_complexity)]
    fn raw(
        &self,
        night: usize,
        subject: &Subject,
    ) -> anyhow::Result<(
        &'static str,
        Vec<(String, Vec<u8>)>,
        std::collections::BTreeMap<String, String>,
    )> {
        let w = &self.world;
        let params = std::collections::BTreeMap::new();
        Ok(match subject {
            Subject::Hostinfo => {
                // No expectations: cores and memory are learned from each
                // node's own history and its peers (docs/slurm.md).
                let mut files = Vec::new();
                for (node, f) in w.hostinfo(night) {
                    files.push((format!("host-{node}.json"), serde_json::to_vec(&f)?));
                }
                ("hostinfo", files, params)
            }
            Subject::Pio(fs) => {
                let k = w.s.filesystems.iter().position(|x| x == fs).unwrap_or(0);
                let r = w.pio(night, k);
                (
                    "pio",
                    vec![("pio.json".into(), serde_json::to_vec(&r)?)],
                    params,
                )
            }
            Subject::Linktest => {
                let run = w.linktest(night);
                let name = Path::new("linktest.sion");
                let parts = benchlake_formats::linktest::v2::encode_file(
                    &run,
                    name,
                    &benchlake_formats::sion::SionWriteOptions::default(),
                )?;
                let files = parts
                    .into_iter()
                    .enumerate()
                    .map(|(k, data)| {
                        let p = benchlake_formats::sion::read::multi_file_name(name, k as u32);
                        (p.display().to_string(), data)
                    })
                    .collect();
                ("linktest", files, params)
            }
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn run_one(
        &self,
        night: usize,
        slot: usize,
        subject: &Subject,
        schedule: &str,
        format: &str,
        files: Vec<(String, Vec<u8>)>,
        params: std::collections::BTreeMap<String, String>,
    ) -> anyhow::Result<RunOut> {
        let mut o = RunOut::default();
        let at = self.world.night_ms(night) + slot as i64 * 600_000;
        let run_id = new_id_at(at);
        let task_id = new_id_at(at + 1);
        let date = self.world.date(night).format("%Y-%m-%d").to_string();
        let t = Instant::now();
        let mut keys = Vec::with_capacity(files.len());
        for (name, data) in files {
            let key = layout::raw_key(&run_id, &task_id, &name)?;
            self.rt
                .block_on(self.lake.put(&key, bytes::Bytes::from(data)))?;
            keys.push(key);
        }
        let spec = IngestSpec {
            format: format.into(),
            keys,
            task_id,
            agent: "probe".into(),
            agent_hostname: None,
        };
        let info = IngestRunInfo {
            schedule_id: Some(schedule.to_string()),
            benchmark: Some(subject.benchmark().into()),
            params: params.clone(),
            kind: None,
            cores: None,
        };
        let job = |n: i64, spec_json: String, executor| LocalJob {
            job_id: new_id_at(at + n),
            run_id: run_id.clone(),
            run_date: date.clone(),
            spec_json,
            executor,
        };
        let (lake, rt, scratch) = (&self.lake, self.rt.handle(), self.scratch.path());
        let out = local::run(
            lake,
            rt,
            scratch,
            job(
                2,
                ingest_spec_json(&spec, &info),
                &benchlake_worker::executors::Ingest,
            ),
        )?;
        o.timings.ingest_s += secs(t.elapsed());
        let t = Instant::now();
        for (k, f) in out
            .follow_ups
            .iter()
            .filter(|f| f.kind == CHECKS_JOB)
            .enumerate()
        {
            let c = local::run(
                lake,
                rt,
                scratch,
                job(
                    3 + k as i64,
                    f.spec.to_string(),
                    &benchlake_worker::checks::Checks,
                ),
            )?;
            for t in &c.tables {
                collect(&mut o.verdicts, &mut o.statuses, night, subject, t);
            }
        }
        o.timings.checks_s += secs(t.elapsed());
        let t = Instant::now();
        let record = RecordSpec {
            run_id: run_id.clone(),
            schedule_id: Some(schedule.to_string()),
            benchmark: subject.benchmark().into(),
            kind: subject.benchmark().into(),
            status: "SUCCEEDED".into(),
            params,
            submitted_at_ms: at,
            started_at_ms: Some(at),
            finished_at_ms: Some(at + 300_000),
            agents: vec!["probe".into()],
            error: None,
            raw_files: Vec::new(),
            scheduled_for_ms: Some(at),
        };
        local::run(
            lake,
            rt,
            scratch,
            job(
                9,
                serde_json::to_string(&record)?,
                &benchlake_worker::executors::Record,
            ),
        )?;
        o.timings.record_s += secs(t.elapsed());
        Ok(o)
    }
}

/// What one run of a night gave.
#[derive(Default)]
struct RunOut {
    verdicts: Vec<Verdict>,
    statuses: BTreeMap<String, u64>,
    timings: Timings,
}

/// The verdict rows of a `checks` or `node_health` table: every status
/// counted, the rows that are not PASS kept.
fn collect(
    out: &mut Vec<Verdict>,
    counts: &mut BTreeMap<String, u64>,
    night: usize,
    subject: &Subject,
    t: &TableOutput,
) {
    if !matches!(t.table.as_str(), "checks" | "node_health" | "link_health") {
        return;
    }
    for b in &t.batches {
        let (Some(check), Some(status), Some(message)) =
            (text(b, "check"), text(b, "status"), text(b, "message"))
        else {
            continue;
        };
        let (node, a, z) = (text(b, "node"), text(b, "node_a"), text(b, "node_b"));
        for i in 0..b.num_rows() {
            let target = match (&node, &a, &z) {
                (Some(n), _, _) if n.is_valid(i) => Some(n.value(i).to_string()),
                (_, Some(a), Some(z)) => Some(format!("{}:{}", a.value(i), z.value(i))),
                _ => None,
            };
            let status = status.value(i);
            *counts.entry(status.to_string()).or_default() += 1;
            if status == benchlake_core::verdict::PASS {
                continue;
            }
            out.push(Verdict {
                night,
                subject: subject.clone(),
                target,
                check: check.value(i).to_string(),
                status: status.to_string(),
                message: message.value(i).to_string(),
            });
        }
    }
}
