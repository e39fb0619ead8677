//! Cron schedules: parsing (POSIX 5-field or 6-field with seconds, in an explicit
//! IANA time zone), firing with a catch-up policy, backfills and manual triggers.
//! Backfilled runs of a schedule without `allow_overlap` queue one after
//! another ([`backfill`]); a cron instant that comes while a run of such a
//! schedule is active (queued ones included) is skipped.
//!
//! Instants are computed in the schedule's zone with croner, which follows the
//! Open Cron Pattern Specification for DST: a fixed-time job whose local time
//! falls in a spring-forward gap runs at the first instant after the gap, and one
//! whose local time occurs twice in a fall-back overlap runs once.
use std::str::FromStr;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;

use crate::config::CoordinatorConfig;
use crate::error::{CoordError, Result};
use crate::lifecycle::{self, Effects};
use crate::logic;
use crate::model::*;
use crate::store::Tx;

/// An instant later than this after its cron time counts as missed (catch-up).
pub const ON_TIME_GRACE_MS: i64 = 60_000;
/// Default cap of `CatchUp::All`.
pub const DEFAULT_MAX_CATCH_UP: u32 = 10;

/// A parsed cron expression in a time zone.
#[derive(Debug, Clone)]
pub struct CronSpec {
    cron: Cron,
    tz: Tz,
}

impl CronSpec {
    /// Parses `expr` in zone `tz` (empty = UTC). Errors name the field and
    /// its allowed range ([`crate::cron::normalize`]); an expression whose day
    /// never occurs (`0 0 31 2 *`) is refused.
    pub fn parse(expr: &str, tz: &str) -> Result<Self> {
        let numeric =
            crate::cron::normalize(expr).map_err(|m| CoordError::invalid("schedule.cron", m))?;
        let cron = Cron::from_str(&numeric)
            .map_err(|e| CoordError::invalid("schedule.cron", format!("'{expr}': {e}")))?;
        let tz: Tz = if tz.is_empty() {
            Tz::UTC
        } else {
            tz.parse().map_err(|_| {
                CoordError::invalid(
                    "schedule.time_zone",
                    format!("'{tz}' is not an IANA time zone"),
                )
            })?
        };
        Ok(Self { cron, tz })
    }

    fn at(&self, ms: i64) -> Option<DateTime<Tz>> {
        Utc.timestamp_millis_opt(ms)
            .single()
            .map(|t| t.with_timezone(&self.tz))
    }

    /// The first instant strictly after `ms`.
    pub fn next_after(&self, ms: i64) -> Option<i64> {
        let t = self.at(ms)?;
        self.cron
            .find_next_occurrence(&t, false)
            .ok()
            .map(|n| n.timestamp_millis())
    }

    /// The first instant at or after `ms`.
    pub fn next_from(&self, ms: i64) -> Option<i64> {
        let t = self.at(ms)?;
        self.cron
            .find_next_occurrence(&t, true)
            .ok()
            .map(|n| n.timestamp_millis())
    }

    /// Instants in `[from, to)` (or `[from, to]` when `inclusive_end`), at most `limit`.
    pub fn instants(&self, from: i64, to: i64, inclusive_end: bool, limit: usize) -> Vec<i64> {
        let mut out = Vec::new();
        let mut cur = self.next_from(from);
        while let Some(t) = cur {
            if t > to || (t == to && !inclusive_end) || out.len() >= limit {
                break;
            }
            out.push(t);
            cur = self.next_after(t);
        }
        out
    }

    /// Refuses an expression (`expr`, for the message) that does not fire
    /// within [`crate::cron::FIRE_HORIZON_DAYS`] after `now` (a new schedule).
    pub fn check_fires(&self, expr: &str, now: i64) -> Result<()> {
        let horizon = now.saturating_add(crate::cron::FIRE_HORIZON_DAYS * 86_400_000);
        match self.next_after(now) {
            Some(t) if t <= horizon => Ok(()),
            _ => Err(CoordError::invalid(
                "schedule.cron",
                format!("'{expr}' never fires within 5 years"),
            )),
        }
    }

    /// Human-readable description of the pattern.
    pub fn describe(&self) -> String {
        self.cron.describe()
    }
}

/// Fires every due schedule at `now`; returns the runs created.
pub fn fire_due(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    now: i64,
) -> Result<(Vec<RunRow>, Effects)> {
    let mut created = Vec::new();
    let mut fx = start_stalled_queues(tx, cfg, now)?;
    for mut s in tx.due_schedules(now)? {
        let Some(next) = s.next_fire_ms else { continue };
        let cron = match CronSpec::parse(&s.cron, &s.time_zone) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(schedule = %s.name, error = %e, "unparseable stored schedule; pausing it");
                s.paused = true;
                tx.update_schedule(&s)?;
                continue;
            }
        };
        // Every instant from the due one up to now (bounded: a schedule that missed a
        // year of minutes must not loop for long).
        let due = cron.instants(next, now, true, 100_000);
        let chosen: Vec<i64> = match s.catch_up {
            CatchUp::None => due
                .iter()
                .copied()
                .rfind(|t| now - t <= ON_TIME_GRACE_MS)
                .into_iter()
                .collect(),
            CatchUp::Latest => due.last().copied().into_iter().collect(),
            CatchUp::All => {
                let cap = if s.max_catch_up == 0 {
                    DEFAULT_MAX_CATCH_UP
                } else {
                    s.max_catch_up
                } as usize;
                due[due.len().saturating_sub(cap)..].to_vec()
            }
        };
        if due.len() > chosen.len() {
            tracing::info!(
                schedule = %s.name,
                missed = due.len() - chosen.len(),
                policy = s.catch_up.as_str(),
                "skipped missed instants"
            );
        }
        for t in chosen {
            if !s.allow_overlap && !tx.active_runs_of_schedule(&s.schedule_id)?.is_empty() {
                tracing::warn!(schedule = %s.name, instant = t, "previous run still active; instant skipped (allow_overlap is off)");
                continue;
            }
            let (run, f) = fire_one(tx, cfg, &s, t, now)?;
            created.push(run);
            fx.merge(f);
        }
        s.last_fire_ms = due.last().copied().or(s.last_fire_ms);
        s.next_fire_ms = cron.next_after(now.max(next));
        tx.update_schedule(&s)?;
    }
    Ok((created, fx))
}

/// The runs of a backfill of schedule `s` at `instants` (in order), in one
/// transaction. Without `allow_overlap`, the first instant fires when the
/// schedule has no active run and every later one is queued behind it
/// (PENDING without tasks, started one after another by
/// [`lifecycle::run::start_next_queued`]). Whether the schedule has an active
/// run is read once and then follows the runs created here, and the
/// benchmark's kind is looked up once: a year of nights costs one pass, not
/// one read of every queued run per night.
pub fn backfill(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    s: &ScheduleRow,
    instants: &[i64],
    now: i64,
) -> Result<(Vec<RunRow>, Effects)> {
    let mut fx = Effects::default();
    let mut out = Vec::with_capacity(instants.len());
    let mut active = !s.allow_overlap && !tx.active_runs_of_schedule(&s.schedule_id)?.is_empty();
    let mut kind: Option<String> = None;
    for &t in instants {
        let (run, f) = if s.allow_overlap || !active {
            fire_one(tx, cfg, s, t, now)?
        } else {
            let kind = match &kind {
                Some(k) => k.clone(),
                None => {
                    let agents = tx.list_agents()?;
                    let k = logic::find_benchmark(&agents, &s.spec.benchmark)
                        .map(|b| b.kind)
                        .unwrap_or_else(|| "unknown".into());
                    kind = Some(k.clone());
                    k
                }
            };
            let origin = Origin {
                schedule_id: Some(s.schedule_id.clone()),
                scheduled_for_ms: Some(t),
                notify: s.notify.clone(),
                owner: s.owner.clone(),
                ..Default::default()
            };
            lifecycle::run::create_queued(tx, s.spec.clone(), kind, origin, now)?
        };
        active |= !run.state.is_final();
        fx.merge(f);
        out.push(run);
    }
    Ok((out, fx))
}

/// Starts queued runs whose schedule has no active run left (a run that
/// ended in a transaction concurrent with the backfill that queued them).
fn start_stalled_queues(tx: &mut dyn Tx, cfg: &CoordinatorConfig, now: i64) -> Result<Effects> {
    let mut fx = Effects::default();
    let pending = tx.list_runs(&crate::store::RunFilter {
        state: Some(RunState::Pending),
        limit: 10_000,
        ..Default::default()
    })?;
    let mut schedules: Vec<String> = pending
        .into_iter()
        .filter(|r| r.queued)
        .filter_map(|r| r.schedule_id)
        .collect();
    schedules.sort();
    schedules.dedup();
    for s in schedules {
        lifecycle::run::start_next_queued(tx, cfg, &s, now, &mut fx)?;
    }
    Ok(fx)
}

/// Creates the run of schedule `s` for instant `t`. A run that cannot be placed
/// (no eligible agent, unknown benchmark) is still created, as FAILED with the
/// reason, so a missed nightly check is visible.
pub fn fire_one(
    tx: &mut dyn Tx,
    cfg: &CoordinatorConfig,
    s: &ScheduleRow,
    t: i64,
    now: i64,
) -> Result<(RunRow, Effects)> {
    let origin = Origin {
        schedule_id: Some(s.schedule_id.clone()),
        scheduled_for_ms: Some(t),
        notify: s.notify.clone(),
        owner: s.owner.clone(),
        ..Default::default()
    };
    let agents = tx.list_agents()?;
    let kind = logic::find_benchmark(&agents, &s.spec.benchmark)
        .map(|b| b.kind)
        .unwrap_or_else(|| "unknown".into());
    match logic::select_agents(tx, &s.spec, &[]) {
        Ok(chosen) => lifecycle::run::create(tx, cfg, s.spec.clone(), kind, origin, chosen, now),
        Err(e) => {
            tracing::warn!(schedule = %s.name, error = %e, "scheduled run could not be placed");
            let reason = format!("could not place the run: {e}");
            lifecycle::run::create_unplaced(tx, cfg, s.spec.clone(), kind, origin, reason, now)
        }
    }
}
