//! replaympi-style outputs: the per-CPU summary, `column_data` (per-routine CSV), the
//! transfer matrices and a Chrome-trace (Perfetto) JSON timeline.
use std::fmt::Write;

use crate::result::ReplayResult;

/// The per-CPU summary in replaympi's layout (Bytes in MB = 10^6 B, as printed).
pub fn summary_text(r: &ReplayResult) -> String {
    let mut s = String::from("=====================================================\n");
    for c in &r.ranks {
        let i = c.rank;
        let _ = writeln!(
            s,
            " CPU {i} Total  Time              : {:12.6} s",
            c.total_s
        );
        let _ = writeln!(
            s,
            " CPU {i} Total computation Time   : {:12.6} s",
            c.computation_s
        );
        let _ = writeln!(
            s,
            " CPU {i} Total communication Time : {:12.6} s, Wait   : {:12.6} s",
            c.communication_s(),
            c.comm.wait
        );
        let _ = writeln!(
            s,
            " CPU {i} latency: {:12.6} s, mess<=1024: {:12.6} s, mess>1024: {:12.6} s",
            c.comm.latency, c.comm.small, c.comm.big
        );
        let _ = writeln!(
            s,
            " CPU {i} Bytes(Mb) :  recv {:12.6} buffered {:12.6}",
            c.bytes_received as f64 / 1e6,
            c.bytes_buffered as f64 / 1e6
        );
        s.push_str(" =====================================================\n");
    }
    s
}

/// `column_data`: one CSV row per (rank, routine).
pub fn column_data_csv(r: &ReplayResult) -> String {
    let mut s = String::from("rank,function,wait_s,latency_s,small_transfer_s,big_transfer_s\n");
    for c in &r.ranks {
        for (f, t) in &c.functions {
            let _ = writeln!(
                s,
                "{},{},{:.9},{:.9},{:.9},{:.9}",
                c.rank, f, t.wait, t.latency, t.small, t.big
            );
        }
    }
    s
}

/// The transfer matrices of replaysend_recv: requests and bytes per receiver (row) and
/// sender (column).
pub fn transfer_matrix_text(r: &ReplayResult) -> String {
    let n = r.ranks.len();
    let mut s = String::from("# requests: receiver (row) x sender (column)\n");
    for which in 0..2 {
        if which == 1 {
            s.push_str("# bytes: receiver (row) x sender (column)\n");
        }
        for recv in 0..n as u32 {
            let row: Vec<String> = (0..n as u32)
                .map(|snd| {
                    r.transfers
                        .get(&(recv, snd))
                        .map_or(0, |v| if which == 0 { v.0 } else { v.1 })
                        .to_string()
                })
                .collect();
            let _ = writeln!(s, "{}", row.join(" "));
        }
    }
    s
}

fn esc(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"?\"".into())
}

/// A Chrome trace (`chrome://tracing`, Perfetto) of the timeline: one thread per rank,
/// complete events in microseconds.
pub fn chrome_trace_json(r: &ReplayResult) -> String {
    let mut s = String::from("{\"traceEvents\":[");
    let mut first = true;
    for c in &r.ranks {
        if !first {
            s.push(',');
        }
        first = false;
        let _ = write!(
            s,
            "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":{},\"args\":{{\"name\":\"rank {}\"}}}}",
            c.rank, c.rank
        );
    }
    for e in &r.timeline {
        if !first {
            s.push(',');
        }
        first = false;
        let _ = write!(
            s,
            "{{\"name\":{},\"ph\":\"X\",\"pid\":0,\"tid\":{},\"ts\":{:.3},\"dur\":{:.3}}}",
            esc(&e.name),
            e.rank,
            e.start_s * 1e6,
            (e.end_s - e.start_s) * 1e6
        );
    }
    s.push_str("],\"displayTimeUnit\":\"ns\"}");
    s
}

/// Paraver state of a timeline interval name.
fn prv_state(name: &str) -> u32 {
    match name {
        "compute" => 1,
        "wait" => 3,
        "idle (rendezvous)" => 4,
        "latency" => 15,
        n if n.starts_with("MPI_") => 13,
        _ => 15,
    }
}

/// The timeline as a Paraver `.prv` trace (one node and CPU per rank, one
/// application, state records `1:cpu:1:task:1:begin:end:state` in ns; states: 1 running,
/// 3 waiting a message, 4 blocking send, 13 group communication, 15 others/latency).
pub fn paraver_prv(r: &ReplayResult) -> String {
    let n = r.ranks.len().max(1);
    let ftime = (r.predicted_time_s * 1e9).round() as u64;
    let cpus = vec!["1"; n].join(",");
    let tasks: Vec<String> = (1..=n).map(|i| format!("1:{i}")).collect();
    let mut s = format!(
        "#Paraver (01/01/70 at 00:00):{ftime}_ns:{n}({cpus}):1:{n}({})\n",
        tasks.join(",")
    );
    let mut evs: Vec<&crate::result::TimelineEvent> = r.timeline.iter().collect();
    evs.sort_by(|a, b| a.start_s.total_cmp(&b.start_s).then(a.rank.cmp(&b.rank)));
    for e in evs {
        let t = e.rank + 1;
        let _ = writeln!(
            s,
            "1:{t}:1:{t}:1:{}:{}:{}",
            (e.start_s * 1e9).round() as u64,
            (e.end_s * 1e9).round() as u64,
            prv_state(&e.name)
        );
    }
    s
}
