//! Acknowledgements and maintenance windows: findings an admin already
//! knows about (docs/slurm.md, "Acknowledging and silencing").
//!
//! - An [`Ack`] says "I know `node` fails `check`": a node name (or `*`,
//!   every node and the run-level checks), a check pattern (a name, a family
//!   prefix ending in `.` such as `node.`, or `*`), a comment, its author (the
//!   principal of the admin's credential) and an expiry at most
//!   [`MAX_ACK_MS`] ahead. It applies while it has not expired, at the time
//!   benchlake decides: when the run's node actions are taken (the commit of
//!   its `node_health` rows), when its notification is built (the sender's
//!   first look at the outbox row), when `node-check` asks.
//! - A [`Maintenance`] window says "these nodes are worked on from start to
//!   end": a result on one of its nodes is silenced when the run that
//!   measured it overlaps the window (from its start, else its submission, to
//!   its end, else now); `node-check` also silences every verdict of a node
//!   whose window is open now.
//!
//! Silenced results stay in the lake exactly as measured (`checks`,
//! `node_health`, the run's verdict). What changes: they are not notified (a
//! run whose only findings are silenced is SKIPPED, the outbox row saying
//! which and why; otherwise the payload lists them under `silenced`), they
//! neither drain a node nor count as the pass that resumes one, and they do
//! not fail `node-check`. A run that FAILED (`run.failed`) is notified as
//! before: that is not a finding about a node.
//!
//! Expired acknowledgements and ended windows stop applying by themselves;
//! they are listed (with `--all`) for [`KEEP_ENDED_MS`] and pruned when a new
//! one is created after that.
use benchlake_proto::v1 as pb;
use serde::Serialize;

use crate::error::{CoordError, Result};
use crate::model::RunRow;
pub use crate::model::{Ack, Maintenance};
use crate::store::Tx;
use crate::verdicts::CheckRow;

/// Longest life of an acknowledgement: 90 days.
pub const MAX_ACK_MS: i64 = 90 * 86_400_000;
/// Longest maintenance window: 90 days.
pub const MAX_WINDOW_MS: i64 = 90 * 86_400_000;
/// How far ahead a window may start: one year.
pub const MAX_WINDOW_AHEAD_MS: i64 = 366 * 86_400_000;
/// Longest comment or reason, in bytes.
pub const MAX_TEXT: usize = 1000;
/// Expired acknowledgements and ended windows are kept this long (30 days)
/// for the record, then pruned.
pub const KEEP_ENDED_MS: i64 = 30 * 86_400_000;
/// Longest check pattern.
const MAX_CHECK: usize = 128;

/// A time for people: `2026-12-12T08:00Z` (seconds when there are any).
pub fn fmt_time(ms: i64) -> String {
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(t) if ms % 60_000 == 0 => t.format("%Y-%m-%dT%H:%MZ").to_string(),
        Some(t) => t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        None => ms.to_string(),
    }
}

impl Ack {
    /// Whether it applies at `now`.
    pub fn active(&self, now: i64) -> bool {
        self.created_ms <= now && now < self.expires_ms
    }

    /// Whether it covers `check` on `node` (None: a run-level check) in a
    /// run of `schedule` (None: a run without one).
    pub fn covers(&self, node: Option<&str>, check: &str, schedule: Option<&str>) -> bool {
        let node_ok = self.node == "*" || node == Some(self.node.as_str());
        let schedule_ok = self.schedule_id.is_none() || self.schedule_id.as_deref() == schedule;
        node_ok && schedule_ok && pattern_matches(&self.check, check)
    }

    /// Why it silences, for people: `acknowledged by alice until
    /// 2026-12-12T00:00Z: DIMM on order`.
    pub fn describe(&self) -> String {
        let scope = match &self.schedule_name {
            Some(n) => format!(" for schedule {n}"),
            None => String::new(),
        };
        format!(
            "acknowledged by {}{scope} until {}: {}",
            self.author,
            fmt_time(self.expires_ms),
            self.comment
        )
    }

    pub fn to_pb(&self, now: i64) -> pb::Acknowledgement {
        pb::Acknowledgement {
            id: self.id.clone(),
            node: self.node.clone(),
            check: self.check.clone(),
            comment: self.comment.clone(),
            author: self.author.clone(),
            created_ms: self.created_ms,
            expires_ms: self.expires_ms,
            expired: now >= self.expires_ms,
            schedule_id: self.schedule_id.clone().unwrap_or_default(),
            schedule_name: self.schedule_name.clone().unwrap_or_default(),
        }
    }
}

impl Maintenance {
    /// Whether `[from, to]` overlaps the window on `node`.
    pub fn covers(&self, node: &str, from: i64, to: i64) -> bool {
        from < self.end_ms && to >= self.start_ms && self.node_names.iter().any(|n| n == node)
    }

    /// SCHEDULED, ACTIVE or ENDED at `now`.
    pub fn state(&self, now: i64) -> &'static str {
        if now < self.start_ms {
            "SCHEDULED"
        } else if now < self.end_ms {
            "ACTIVE"
        } else {
            "ENDED"
        }
    }

    /// Why it silences, for people.
    pub fn describe(&self) -> String {
        format!(
            "maintenance {} {} to {} by {}: {}",
            self.nodes,
            fmt_time(self.start_ms),
            fmt_time(self.end_ms),
            self.author,
            self.reason
        )
    }

    pub fn to_pb(&self, now: i64) -> pb::MaintenanceWindow {
        pb::MaintenanceWindow {
            id: self.id.clone(),
            nodes: self.nodes.clone(),
            node_names: self.node_names.clone(),
            start_ms: self.start_ms,
            end_ms: self.end_ms,
            reason: self.reason.clone(),
            author: self.author.clone(),
            created_ms: self.created_ms,
            state: self.state(now).to_string(),
        }
    }
}

/// Whether `pattern` (a check name, a family prefix ending in `.`, or `*`)
/// covers `check`.
pub fn pattern_matches(pattern: &str, check: &str) -> bool {
    pattern == "*" || pattern == check || (pattern.ends_with('.') && check.starts_with(pattern))
}

/// Checks a check pattern and returns it normalised (`node.*` → `node.`).
pub fn check_pattern(p: &str) -> Result<String> {
    let p = p.trim();
    if p == "*" {
        return Ok(p.into());
    }
    let p = p.strip_suffix('*').unwrap_or(p);
    let bad = |why: &str| {
        Err(CoordError::invalid(
            "check",
            format!("'{}' {why}", p.escape_default()),
        ))
    };
    if p.is_empty() {
        return bad("is empty (a check name, a family like 'node.', or '*')");
    }
    if p.len() > MAX_CHECK {
        return bad("is longer than 128 characters");
    }
    if p.starts_with(['.', '-']) {
        return bad("starts with '.' or '-'");
    }
    if !p
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    {
        return bad(
            "is not a check name (letters, digits, '.', '_', '-'; a family ends with '.'; or '*')",
        );
    }
    Ok(p.to_string())
}

fn check_text(field: &str, s: &str) -> Result<String> {
    let s = s.trim();
    if s.is_empty() {
        return Err(CoordError::invalid(field, "is required"));
    }
    if s.len() > MAX_TEXT {
        return Err(CoordError::invalid(
            field,
            format!("is {} bytes long; at most {MAX_TEXT}", s.len()),
        ));
    }
    if s.chars().any(|c| c.is_control()) {
        return Err(CoordError::invalid(
            field,
            "contains control characters (one line of text)",
        ));
    }
    Ok(s.to_string())
}

/// Who made it: the credential's principal (`anonymous` with authentication
/// off).
pub fn author_of(id: &crate::config::Identity) -> String {
    id.principal().unwrap_or_else(|| "anonymous".into())
}

/// A new acknowledgement from a request, validated (errors name the field).
/// `schedule` is the request's schedule, resolved by the caller: (id, name).
pub fn new_ack(
    r: &pb::AcknowledgeCheckRequest,
    schedule: Option<(String, String)>,
    author: &str,
    now: i64,
) -> Result<Ack> {
    let node = r.node.trim();
    if node != "*" {
        benchlake_core::scontrol::check_node_name(node)
            .map_err(|e| CoordError::invalid("node", e))?;
    }
    let check = check_pattern(&r.check)?;
    let comment = check_text("comment", &r.comment)?;
    if r.expires_ms <= now {
        return Err(CoordError::invalid(
            "expires_ms",
            format!(
                "{} is not in the future (now {})",
                fmt_time(r.expires_ms),
                fmt_time(now)
            ),
        ));
    }
    if r.expires_ms - now > MAX_ACK_MS {
        return Err(CoordError::invalid(
            "expires_ms",
            format!(
                "{} is more than 90 days ahead: acknowledge again when it expires",
                fmt_time(r.expires_ms)
            ),
        ));
    }
    Ok(Ack {
        id: benchlake_core::ids::new_id_at(now),
        node: node.to_string(),
        check,
        comment,
        author: author.to_string(),
        created_ms: now,
        expires_ms: r.expires_ms,
        schedule_id: schedule.as_ref().map(|s| s.0.clone()),
        schedule_name: schedule.map(|s| s.1),
    })
}

/// A new maintenance window from a request, validated.
pub fn new_window(r: &pb::CreateMaintenanceRequest, author: &str, now: i64) -> Result<Maintenance> {
    let nodes = r.nodes.trim();
    let node_names =
        benchlake_core::hostlist::expand(nodes).map_err(|e| CoordError::invalid("nodes", e))?;
    let reason = check_text("reason", &r.reason)?;
    if r.end_ms <= r.start_ms {
        return Err(CoordError::invalid(
            "end_ms",
            format!(
                "{} is not after the start {}",
                fmt_time(r.end_ms),
                fmt_time(r.start_ms)
            ),
        ));
    }
    if r.end_ms <= now {
        return Err(CoordError::invalid(
            "end_ms",
            format!(
                "{} is in the past: a window silences results from now on",
                fmt_time(r.end_ms)
            ),
        ));
    }
    if r.end_ms - r.start_ms > MAX_WINDOW_MS {
        return Err(CoordError::invalid(
            "end_ms",
            "the window is longer than 90 days",
        ));
    }
    if r.start_ms - now > MAX_WINDOW_AHEAD_MS {
        return Err(CoordError::invalid(
            "start_ms",
            format!("{} is more than a year ahead", fmt_time(r.start_ms)),
        ));
    }
    Ok(Maintenance {
        id: benchlake_core::ids::new_id_at(now),
        nodes: nodes.to_string(),
        node_names,
        start_ms: r.start_ms,
        end_ms: r.end_ms,
        reason,
        author: author.to_string(),
        created_ms: now,
    })
}

/// The time a run covers: from its start (else its submission) to its end
/// (else `now`).
pub fn run_span(run: &RunRow, now: i64) -> (i64, i64) {
    (
        run.started_at_ms.unwrap_or(run.submitted_at_ms),
        run.finished_at_ms.unwrap_or(now),
    )
}

/// Every acknowledgement and window on record, to judge results with.
#[derive(Debug, Clone, Default)]
pub struct Silences {
    pub acks: Vec<Ack>,
    pub windows: Vec<Maintenance>,
}

impl Silences {
    /// Reads them in `tx`.
    pub fn read(tx: &mut dyn Tx) -> Result<Self> {
        Ok(Self {
            acks: tx.list_acks()?,
            windows: tx.list_maintenance()?,
        })
    }

    /// The acknowledgement covering `check` on `node` in a run of
    /// `schedule` at `now`.
    pub fn ack_for(
        &self,
        node: Option<&str>,
        check: &str,
        schedule: Option<&str>,
        now: i64,
    ) -> Option<&Ack> {
        self.acks
            .iter()
            .find(|a| a.active(now) && a.covers(node, check, schedule))
    }

    /// The window `node` is in at `now`.
    pub fn maintenance_now(&self, node: &str, now: i64) -> Option<&Maintenance> {
        self.windows.iter().find(|w| w.covers(node, now, now))
    }

    /// Why a `node_health` row of `check` on `node`, measured by a run
    /// spanning `span`, is silenced at `now` (None: it is not).
    pub fn why_node(
        &self,
        node: &str,
        check: &str,
        schedule: Option<&str>,
        now: i64,
        span: (i64, i64),
    ) -> Option<String> {
        if let Some(a) = self.ack_for(Some(node), check, schedule, now) {
            return Some(a.describe());
        }
        self.windows
            .iter()
            .find(|w| w.covers(node, span.0, span.1))
            .map(Maintenance::describe)
    }

    /// Why a run-level `checks` row is silenced: an acknowledgement of its
    /// check on `*`, or windows over every one of the run's `agents`.
    pub fn why_run(
        &self,
        check: &str,
        agents: &[String],
        schedule: Option<&str>,
        now: i64,
        span: (i64, i64),
    ) -> Option<String> {
        if let Some(a) = self.ack_for(None, check, schedule, now) {
            return Some(a.describe());
        }
        if agents.is_empty() {
            return None;
        }
        let mut why = Vec::new();
        for a in agents {
            let w = self.windows.iter().find(|w| w.covers(a, span.0, span.1))?;
            let d = w.describe();
            if !why.contains(&d) {
                why.push(d);
            }
        }
        Some(why.join("; "))
    }
}

/// A silenced finding (what a notification lists under `silenced`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Silenced {
    /// None for a run-level check.
    pub node: Option<String>,
    pub check: String,
    pub status: String,
    pub value: Option<f64>,
    pub reference: Option<f64>,
    pub unit: String,
    pub message: String,
    pub why: String,
}

impl Silenced {
    fn of(node: Option<&str>, r: &CheckRow, why: String) -> Self {
        Self {
            node: node.map(String::from),
            check: r.check.clone(),
            status: r.status.clone(),
            value: r.value,
            reference: r.reference,
            unit: r.unit.clone(),
            message: r.message.clone(),
            why,
        }
    }

    /// One line: `n2 node.cores FAIL (acknowledged by …)`.
    pub fn line(&self) -> String {
        format!(
            "{} {} {} ({})",
            self.node.as_deref().unwrap_or("*"),
            self.check,
            self.status,
            self.why
        )
    }
}

/// Status given in memory to a silenced row so that the verdict, event and
/// failing lists of a notification leave it out (never written anywhere).
const SILENCED: &str = "SILENCED";

/// Silences the failing rows (FAIL, REGRESSION, ERROR) of a notification's facts: their
/// status becomes [`SILENCED`] in `facts` (so `facts.event()` no longer
/// sees them) and they are returned.
pub fn silence_facts(s: &Silences, facts: &mut crate::notify::RunFacts, now: i64) -> Vec<Silenced> {
    let span = run_span(&facts.run, now);
    let schedule = facts.run.schedule_id.clone();
    let schedule = schedule.as_deref();
    let failing = |st: &str| matches!(st, "FAIL" | "REGRESSION" | "ERROR");
    let mut out = Vec::new();
    for r in facts.checks.iter_mut().filter(|r| failing(&r.status)) {
        if let Some(why) = s.why_run(&r.check, &facts.agents, schedule, now, span) {
            out.push(Silenced::of(None, r, why));
            r.status = SILENCED.into();
        }
    }
    for (n, r) in facts.nodes.iter_mut().filter(|(_, r)| failing(&r.status)) {
        if let Some(why) = s.why_node(n, &r.check, schedule, now, span) {
            out.push(Silenced::of(Some(n), r, why));
            r.status = SILENCED.into();
        }
    }
    out
}

/// The facts of a notification ([`crate::notify::run_facts`]) with its
/// silenced findings set apart ([`silence_facts`]): (facts, the run's
/// verdict as measured, the silenced findings).
pub async fn read_facts(
    c: &crate::Coordinator,
    run_id: &str,
    now: i64,
) -> Result<(crate::notify::RunFacts, Option<&'static str>, Vec<Silenced>)> {
    let mut facts = crate::notify::run_facts(c, run_id).await?;
    let s = c.db(Silences::read).await?;
    let measured = facts.verdict();
    let silenced = silence_facts(&s, &mut facts, now);
    Ok((facts, measured, silenced))
}

/// The outbox note of a run SKIPPED because its findings are silenced.
pub fn skip_note(silenced: &[Silenced]) -> Option<String> {
    if silenced.is_empty() {
        return None;
    }
    let lines: Vec<String> = silenced.iter().take(20).map(Silenced::line).collect();
    let more = silenced.len().saturating_sub(20);
    Some(format!(
        "silenced: {}{}",
        lines.join("; "),
        if more > 0 {
            format!("; and {more} more")
        } else {
            String::new()
        }
    ))
}

/// A payload with the silenced findings added (`silenced`) and the run's
/// verdict as measured (`run.verdict`).
pub fn annotate(body: String, measured: Option<&str>, silenced: &[Silenced]) -> String {
    if silenced.is_empty() {
        return body;
    }
    match serde_json::from_str::<serde_json::Value>(&body) {
        Ok(mut v) => {
            v["silenced"] = serde_json::json!(silenced);
            if let Some(run) = v.get_mut("run") {
                run["verdict"] = serde_json::json!(measured);
            }
            v.to_string()
        }
        Err(_) => body,
    }
}

/// Splits a run's `node_health` rows into those node actions act on and
/// those silenced (node, row, why) at `now`.
#[allow(clippy::type_complexity)]
pub fn split_node_rows(
    s: &Silences,
    run: &RunRow,
    rows: Vec<(String, CheckRow)>,
    now: i64,
) -> (Vec<(String, CheckRow)>, Vec<(String, CheckRow, String)>) {
    let span = run_span(run, now);
    let mut keep = Vec::new();
    let mut silenced = Vec::new();
    for (n, r) in rows {
        match s.why_node(&n, &r.check, run.schedule_id.as_deref(), now, span) {
            Some(why) => silenced.push((n, r, why)),
            None => keep.push((n, r)),
        }
    }
    (keep, silenced)
}

/// Marks the verdicts of `node` (`GetNodeHealth`) that are silenced at
/// `now` (`silenced`: why): by an acknowledgement, by a window the verdict's
/// run overlapped, or by a window the node is in now. Returns the window the
/// node is in now, described ("" when none). One read of the silences and of
/// each verdict's run (a node has a few node checks).
pub fn node_silences(
    tx: &mut dyn Tx,
    node: &str,
    checks: &mut [pb::NodeCheckVerdict],
    runs: &[String],
    now: i64,
) -> Result<String> {
    let s = Silences::read(tx)?;
    if s.acks.is_empty() && s.windows.is_empty() {
        return Ok(String::new());
    }
    let mut spans = std::collections::HashMap::new();
    for r in runs {
        if !spans.contains_key(r)
            && let Some(run) = tx.get_run(r)?
        {
            spans.insert(r.clone(), (run_span(&run, now), run.schedule_id));
        }
    }
    let current = s.maintenance_now(node, now).map(Maintenance::describe);
    for c in checks.iter_mut() {
        let (span, schedule) = match spans.get(&c.run_id) {
            Some((span, schedule)) => (*span, schedule.as_deref()),
            None => ((now, now), None),
        };
        if let Some(why) = s
            .why_node(node, &c.check, schedule, now, span)
            .or_else(|| current.clone())
        {
            c.silenced = why;
        }
    }
    Ok(current.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_796_000_000_000;
    const H: i64 = 3_600_000;

    fn req(node: &str, check: &str, comment: &str, expires: i64) -> pb::AcknowledgeCheckRequest {
        pb::AcknowledgeCheckRequest {
            node: node.into(),
            check: check.into(),
            comment: comment.into(),
            expires_ms: expires,
            schedule: String::new(),
        }
    }

    #[test]
    fn acknowledgements_are_validated_naming_the_field() {
        let a = new_ack(
            &req("n3", "node.*", " DIMM on order ", NOW + H),
            None,
            "alice",
            NOW,
        )
        .unwrap();
        assert_eq!((a.node.as_str(), a.check.as_str()), ("n3", "node."));
        assert_eq!(a.comment, "DIMM on order");
        assert_eq!(a.author, "alice");
        for (r, field, why) in [
            (req("-n3", "x", "c", NOW + H), "node", "starts with '-'"),
            (req("n3", "", "c", NOW + H), "check", "empty"),
            (req("n3", "a b", "c", NOW + H), "check", "not a check name"),
            (req("n3", ".x", "c", NOW + H), "check", "starts with"),
            (req("n3", "x", " ", NOW + H), "comment", "required"),
            (
                req("n3", "x", &"c".repeat(1001), NOW + H),
                "comment",
                "at most 1000",
            ),
            (req("n3", "x", "a\nb", NOW + H), "comment", "control"),
            (req("n3", "x", "c", NOW), "expires_ms", "not in the future"),
            (
                req("n3", "x", "c", NOW + 91 * 24 * H),
                "expires_ms",
                "90 days",
            ),
        ] {
            let e = new_ack(&r, None, "alice", NOW).unwrap_err().to_string();
            assert!(e.contains(field) && e.contains(why), "{r:?}: {e}");
        }
    }

    #[test]
    fn windows_are_validated_and_expanded() {
        let w = |nodes: &str, s: i64, e: i64, reason: &str| pb::CreateMaintenanceRequest {
            nodes: nodes.into(),
            start_ms: s,
            end_ms: e,
            reason: reason.into(),
        };
        let m = new_window(&w("n[1-4]", NOW, NOW + 4 * H, "firmware"), "bob", NOW).unwrap();
        assert_eq!(m.node_names, ["n1", "n2", "n3", "n4"]);
        assert_eq!(m.state(NOW - 1), "SCHEDULED");
        assert_eq!(m.state(NOW), "ACTIVE");
        assert_eq!(m.state(NOW + 4 * H), "ENDED");
        for (r, field, why) in [
            (w("n[1-", NOW, NOW + H, "r"), "nodes", "without ']'"),
            (w("n1", NOW, NOW + H, ""), "reason", "required"),
            (w("n1", NOW + H, NOW, "r"), "end_ms", "not after the start"),
            (w("n1", NOW - 2 * H, NOW - H, "r"), "end_ms", "in the past"),
            (
                w("n1", NOW, NOW + 91 * 24 * H, "r"),
                "end_ms",
                "longer than 90 days",
            ),
            (
                w("n1", NOW + 400 * 24 * H, NOW + 401 * 24 * H, "r"),
                "start_ms",
                "a year",
            ),
        ] {
            let e = new_window(&r, "bob", NOW).unwrap_err().to_string();
            assert!(e.contains(field) && e.contains(why), "{r:?}: {e}");
        }
    }

    #[test]
    fn a_notification_leaves_silenced_findings_out() {
        use crate::model::{Nodes, Origin, RunState, Spec};
        use crate::notify::RunFacts;
        let spec = Spec {
            benchmark: "hostinfo".into(),
            params: Default::default(),
            nodes: Nodes::default(),
            launcher: benchlake_core::bench::LauncherKind::Local,
            max_attempts: 1,
            timeout_s: 60,
            slurm: Default::default(),
        };
        let mut run = RunRow::new("01RUN".into(), spec, "hostinfo", Origin::default(), NOW - H);
        run.state = RunState::Succeeded;
        run.started_at_ms = Some(NOW - H);
        run.finished_at_ms = Some(NOW - H / 2);
        let row = |c: &str, st: &str| CheckRow {
            check: c.into(),
            status: st.into(),
            value: Some(2.0),
            reference: Some(64.0),
            unit: "cores".into(),
            message: String::new(),
            ..Default::default()
        };
        let facts = || RunFacts {
            run: run.clone(),
            schedule_name: None,
            agents: vec!["login".into()],
            checks: vec![],
            nodes: vec![
                ("n2".into(), row("node.cores", "FAIL")),
                ("n3".into(), row("node.cores", "FAIL")),
                ("n3".into(), row("node.kernel", "PASS")),
            ],
        };
        let ack = Ack {
            id: "a".into(),
            node: "n2".into(),
            check: "node.cores".into(),
            comment: "DIMM on order".into(),
            author: "alice".into(),
            created_ms: NOW - 2 * H,
            expires_ms: NOW + H,
            schedule_id: None,
            schedule_name: None,
        };
        let window = Maintenance {
            id: "m".into(),
            nodes: "n3".into(),
            node_names: vec!["n3".into()],
            start_ms: NOW - 3 * H / 4,
            end_ms: NOW + H,
            reason: "firmware".into(),
            author: "bob".into(),
            created_ms: NOW,
        };
        // Only n2 acknowledged: n3 is still notified, n2 listed as silenced.
        let s = Silences {
            acks: vec![ack.clone()],
            windows: vec![],
        };
        let mut f = facts();
        let measured = f.verdict();
        let silenced = silence_facts(&s, &mut f, NOW);
        assert_eq!(silenced.len(), 1);
        assert_eq!(
            silenced[0].line(),
            "n2 node.cores FAIL (acknowledged by alice until 2026-11-30T01:53:20Z: DIMM on order)"
        );
        assert_eq!(f.event(), Some("verdict.fail"));
        let nodes: Vec<String> = f.failing_nodes().into_iter().map(|n| n.node).collect();
        assert_eq!(nodes, ["n3"]);
        let body = crate::notify::payload(&f, "verdict.fail", "d", "ops", None, NOW);
        let v: serde_json::Value =
            serde_json::from_str(&annotate(body, measured, &silenced)).unwrap();
        assert_eq!(v["run"]["verdict"], "FAIL");
        assert_eq!(v["silenced"][0]["node"], "n2");
        assert_eq!(v["silenced"][0]["value"], 2.0);
        assert_eq!(v["failing_nodes"][0]["node"], "n3");
        // n3 in a window the run overlapped too: nothing left to tell.
        let s = Silences {
            acks: vec![ack],
            windows: vec![window],
        };
        let mut f = facts();
        let silenced = silence_facts(&s, &mut f, NOW);
        assert_eq!(f.event(), None, "SKIPPED");
        let note = skip_note(&silenced).unwrap();
        assert!(
            note.starts_with("silenced: n2 node.cores FAIL (acknowledged by alice"),
            "{note}"
        );
        assert!(
            note.contains("; n3 node.cores FAIL (maintenance n3 "),
            "{note}"
        );
        assert!(note.ends_with("by bob: firmware)"), "{note}");
        // A run that FAILED is notified whatever is silenced.
        let mut f = facts();
        f.run.state = RunState::Failed;
        silence_facts(&s, &mut f, NOW);
        assert_eq!(f.event(), Some("run.failed"));
        assert_eq!(skip_note(&[]), None);
    }

    #[test]
    fn what_is_silenced_and_until_when() {
        let ack = |node: &str, check: &str, exp: i64| Ack {
            id: "a".into(),
            node: node.into(),
            check: check.into(),
            comment: "DIMM on order".into(),
            author: "alice".into(),
            created_ms: NOW,
            expires_ms: exp,
            schedule_id: None,
            schedule_name: None,
        };
        let s = Silences {
            acks: vec![
                ack("n3", "node.", NOW + H),
                ack("*", "io.write_bw_mib_s", NOW + H),
            ],
            windows: vec![Maintenance {
                id: "m".into(),
                nodes: "n[1-2]".into(),
                node_names: vec!["n1".into(), "n2".into()],
                start_ms: NOW + 2 * H,
                end_ms: NOW + 3 * H,
                reason: "firmware".into(),
                author: "bob".into(),
                created_ms: NOW,
            }],
        };
        let why = s
            .why_node("n3", "node.cores", None, NOW, (NOW, NOW))
            .unwrap();
        assert_eq!(
            why,
            "acknowledged by alice until 2026-11-30T01:53:20Z: DIMM on order"
        );
        assert!(
            s.why_node("n3", "nodecores", None, NOW, (NOW, NOW))
                .is_none()
        );
        assert!(
            s.why_node("n4", "node.cores", None, NOW, (NOW, NOW))
                .is_none()
        );
        // Expired: applies no more.
        assert!(
            s.why_node("n3", "node.cores", None, NOW + H, (NOW, NOW))
                .is_none()
        );
        // A run overlapping the window on n2 (not n3, not before it).
        assert!(s.why_node("n2", "x", None, NOW, (NOW, NOW + H)).is_none());
        let w = s
            .why_node("n2", "x", None, NOW + 5 * H, (NOW + H, NOW + 2 * H))
            .unwrap();
        assert!(
            w.starts_with("maintenance n[1-2] 2026-11-30T02:53:20Z to"),
            "{w}"
        );
        assert!(s.maintenance_now("n1", NOW + 2 * H).is_some());
        assert!(s.maintenance_now("n1", NOW + 3 * H).is_none());
        // Run-level checks: an acknowledgement on `*`, or every agent in a window.
        assert!(
            s.why_run("io.write_bw_mib_s", &[], None, NOW, (NOW, NOW))
                .is_some()
        );
        assert!(
            s.why_run("io.read_bw_mib_s", &["n1".into()], None, NOW, (NOW, NOW))
                .is_none()
        );
        let span = (NOW + 2 * H, NOW + 2 * H);
        assert!(
            s.why_run("x", &["n1".into(), "n2".into()], None, NOW, span)
                .is_some()
        );
        assert!(
            s.why_run("x", &["n1".into(), "n3".into()], None, NOW, span)
                .is_none()
        );
        // Scoped to a schedule: only its runs.
        let mut scoped = ack("*", "io.", NOW + H);
        scoped.schedule_id = Some("S1".into());
        scoped.schedule_name = Some("nightly-io".into());
        let s2 = Silences {
            acks: vec![scoped],
            windows: vec![],
        };
        let why = s2
            .why_run("io.read_bw_mib_s", &[], Some("S1"), NOW, (NOW, NOW))
            .unwrap();
        assert!(
            why.starts_with("acknowledged by alice for schedule nightly-io until"),
            "{why}"
        );
        assert!(
            s2.why_run("io.read_bw_mib_s", &[], Some("S2"), NOW, (NOW, NOW))
                .is_none()
        );
        assert!(
            s2.why_run("io.read_bw_mib_s", &[], None, NOW, (NOW, NOW))
                .is_none()
        );
        assert!(
            s2.why_node("n1", "io.x", Some("S1"), NOW, (NOW, NOW))
                .is_some()
        );
        assert!(pattern_matches("*", "anything"));
        assert!(!pattern_matches("node", "node.cores"));
    }
}
