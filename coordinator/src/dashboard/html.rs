//! HTML building blocks: escaping, the page frame, formatting of times,
//! sizes and figures, query strings. Every dynamic value a page shows goes
//! through [`esc`] (text and attribute values alike).
use std::collections::HashMap;
use std::fmt::Write;

use axum::http::HeaderMap;

use super::NAV;
use crate::config::Role;
use crate::http::Http;

/// `s` escaped for HTML text and quoted attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// `s` percent-encoded for a query-string value.
pub fn url_encode(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            o.push(b as char);
        } else {
            let _ = write!(o, "%{b:02X}");
        }
    }
    o
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (hex(b[i + 1]), hex(b[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The pairs of a query string or form body (`a=1&b=x+y`); the first
/// value of a repeated name wins; at most 32 pairs are read.
pub fn parse_query(q: &str) -> HashMap<String, String> {
    let mut m = HashMap::new();
    for pair in q.split('&').filter(|p| !p.is_empty()).take(32) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        m.entry(percent_decode(k))
            .or_insert_with(|| percent_decode(v));
    }
    m
}

/// What the frame of a page shows around its body.
#[derive(Debug, Clone)]
pub struct Chrome {
    /// Whether a logout button is shown (tokens or OpenID Connect are
    /// configured).
    pub logged_in: bool,
    /// Who is signed in, shown beside the logout button: the name (or
    /// "token") and the role.
    pub who: Option<(String, &'static str)>,
    /// The path of the current section, for the navigation.
    pub section: &'static str,
    /// Whether the viewer is an admin (the admin-only entries of the
    /// navigation are shown).
    pub admin: bool,
}

impl Chrome {
    /// The frame for a request to `h`.
    pub fn of(h: &Http, headers: &HeaderMap) -> Self {
        let id = super::identity(h, headers).map(|(i, _)| i);
        let who = id.as_ref().filter(|_| h.login_required()).map(|i| {
            (
                i.name.clone().unwrap_or_else(|| "token".into()),
                i.role.as_str(),
            )
        });
        Self {
            logged_in: h.login_required(),
            who,
            section: "",
            admin: id.is_some_and(|i| i.role == Role::Admin),
        }
    }

    /// Marks `section` (a [`NAV`] path) as the current one.
    pub fn at(mut self, section: &'static str) -> Self {
        self.section = section;
        self
    }
}

/// A whole page. `body_attrs` are extra attributes of `<body>` (already
/// escaped), `body` the page's HTML.
pub fn page(title: &str, body_attrs: &str, c: &Chrome, body: &str) -> String {
    let mut nav = String::new();
    for (path, label) in NAV {
        if !c.admin && super::ADMIN_NAV.contains(path) {
            continue;
        }
        let cur = if *path == c.section {
            " aria-current=\"page\""
        } else {
            ""
        };
        let _ = write!(nav, "<a href=\"{path}\"{cur}>{label}</a>");
    }
    let who = c
        .who
        .as_ref()
        .map(|(name, role)| {
            format!(
                "<span class=\"who\" id=\"who\">{} <span class=\"role\">{role}</span></span>",
                esc(name)
            )
        })
        .unwrap_or_default();
    let logout = if c.logged_in {
        format!(
            "<form method=\"post\" action=\"/logout\" class=\"logout\">{who}<button type=\"submit\">Log out</button></form>"
        )
    } else {
        String::new()
    };
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · benchlake</title>\
         <link rel=\"icon\" href=\"/static/favicon.svg\"><link rel=\"stylesheet\" href=\"/static/dashboard.css\">\
         <script src=\"/static/dashboard.js\" defer></script></head>\
         <body{body_attrs}><header><a class=\"brand\" href=\"/\">benchlake</a><nav>{nav}</nav>{logout}</header>\
         <main>{body}</main></body></html>\n",
        esc(title)
    )
}

/// A millisecond Unix time as `YYYY-MM-DD HH:MM:SS` UTC.
pub fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_else(|| "?".into())
}

/// An optional time, `—` when absent.
pub fn opt_time(ms: Option<i64>) -> String {
    ms.map(time).unwrap_or_else(|| "—".into())
}

/// A duration in milliseconds, human-sized.
pub fn duration(ms: i64) -> String {
    let s = ms as f64 / 1000.0;
    if s < 60.0 {
        format!("{s:.1} s")
    } else if s < 3600.0 {
        format!("{:.0} min {:.0} s", (s / 60.0).floor(), s % 60.0)
    } else {
        format!(
            "{:.0} h {:.0} min",
            (s / 3600.0).floor(),
            (s % 3600.0) / 60.0
        )
    }
}

/// Bytes with a binary unit.
pub fn bytes(n: u64) -> String {
    const U: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < U.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}

/// A measured figure with its unit, to 4 significant digits; seconds below
/// one are shown in ms or µs.
pub fn figure(v: Option<f64>, unit: &str) -> String {
    let Some(v) = v else {
        return "—".into();
    };
    if !v.is_finite() {
        return format!("{v} {unit}");
    }
    let (v, unit) = match unit {
        "s" if v.abs() < 1e-3 && v != 0.0 => (v * 1e6, "µs"),
        "s" if v.abs() < 1.0 && v != 0.0 => (v * 1e3, "ms"),
        u => (v, u),
    };
    // Counts (cores, bytes, pairs) print without decimals; measures keep
    // their four digits (50.00 MiB/s beside 350.0 MiB/s).
    let count = matches!(
        unit,
        "cores" | "bytes" | "B" | "pairs" | "ranks" | "calls" | "files" | "nodes" | "errors"
    );
    let digits = if v == 0.0 || (count && v.fract() == 0.0 && v.abs() < 1e15) {
        0
    } else {
        (3 - v.abs().log10().floor() as i32).clamp(0, 6) as usize
    };
    let mut num = format!("{v:.digits$}");
    if v.abs() >= 10_000.0 {
        // 100000000 reads as 100,000,000 (digits is 0 here).
        let (sign, int) = num.split_at(usize::from(num.starts_with('-')));
        let grouped: Vec<String> = int
            .as_bytes()
            .rchunks(3)
            .rev()
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect();
        num = format!("{sign}{}", grouped.join(","));
    }
    format!("{num} {unit}").trim_end().to_string()
}

/// A PNG the server drew (private, cached for a minute), or the drawing's
/// error as a 500.
pub fn png_response<B: axum::response::IntoResponse>(
    png: Result<B, String>,
) -> axum::response::Response {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    match png {
        Ok(png) => (
            [
                (header::CONTENT_TYPE, "image/png"),
                (header::CACHE_CONTROL, "private, max-age=60"),
            ],
            png,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e).into_response(),
    }
}

/// A state or verdict badge (`class="b b-STATE"`).
pub fn badge(s: &str) -> String {
    let class: String = s
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(16)
        .collect();
    format!("<span class=\"b b-{class}\">{}</span>", esc(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_and_queries() {
        assert_eq!(
            esc("<script>alert('x')</script>&\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;"
        );
        let q = parse_query("status=FAILED&q=01J%3Cx&b=a+b&bad=%zz&end=%4&u=%C3%A9%e");
        assert_eq!(q["status"], "FAILED");
        assert_eq!(q["q"], "01J<x");
        assert_eq!(q["b"], "a b");
        assert_eq!(q["bad"], "%zz");
        assert_eq!(q["end"], "%4");
        assert_eq!(q["u"], "é%e");
        assert_eq!(url_encode("/runs?a=b&c"), "/runs%3Fa%3Db%26c");
        assert_eq!(figure(Some(0.000031744451958), "s"), "31.74 µs");
        assert_eq!(figure(Some(1234.5678), "MiB/s"), "1235 MiB/s");
        assert_eq!(figure(Some(1e8), "MiB/s"), "100,000,000 MiB/s");
        assert_eq!(figure(Some(-12345.6), "B"), "-12,346 B");
        assert_eq!(figure(Some(99_999.4), ""), "99,999");
        assert_eq!(figure(Some(2.0), "cores"), "2 cores");
        assert_eq!(figure(Some(2.5), "cores"), "2.500 cores");
        assert_eq!(bytes(2048), "2.0 KiB");
        assert_eq!(badge("<x>"), "<span class=\"b b-x\">&lt;x&gt;</span>");
    }
}
