//! Checks a schedule's cron expression before croner evaluates it.
//!
//! croner's parser is lenient: it replaces month and weekday names anywhere in
//! the expression (`MON` in the month field becomes January), accepts a
//! seventh (year) field and Quartz extensions, and an expression whose day never
//! occurs (`0 0 31 2 *`) parses and then never fires. [`normalize`] accepts the
//! POSIX form the documentation promises and nothing else, and hands croner a
//! numeric expression (names replaced field by field, macros expanded).
//!
//! Accepted: 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds
//! first); each field a comma-separated list of `*`, `N`, `A-B`, `*/S` or
//! `A-B/S`; month names `JAN`–`DEC` in the month field and weekday names
//! `SUN`–`SAT` in the day-of-week field (any case; `7` is Sunday too); `?` as
//! `*` in the two day fields; and the macros `@yearly`, `@annually`,
//! `@monthly`, `@weekly`, `@daily`, `@hourly`. Every refusal names the field
//! and its allowed range.

/// Longest accepted expression (bytes).
pub const MAX_LEN: usize = 200;

/// How far ahead an expression must fire to be accepted (days, five years).
pub const FIRE_HORIZON_DAYS: i64 = 5 * 365 + 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Second,
    Minute,
    Hour,
    DayOfMonth,
    Month,
    DayOfWeek,
}

/// One field of a cron expression: its name and allowed range.
#[derive(Debug, Clone, Copy)]
struct Field {
    kind: Kind,
    name: &'static str,
    lo: u32,
    hi: u32,
}

const SECOND: Field = Field {
    kind: Kind::Second,
    name: "second",
    lo: 0,
    hi: 59,
};
const MINUTE: Field = Field {
    kind: Kind::Minute,
    name: "minute",
    lo: 0,
    hi: 59,
};
const HOUR: Field = Field {
    kind: Kind::Hour,
    name: "hour",
    lo: 0,
    hi: 23,
};
const DAY_OF_MONTH: Field = Field {
    kind: Kind::DayOfMonth,
    name: "day-of-month",
    lo: 1,
    hi: 31,
};
const MONTH: Field = Field {
    kind: Kind::Month,
    name: "month",
    lo: 1,
    hi: 12,
};
const DAY_OF_WEEK: Field = Field {
    kind: Kind::DayOfWeek,
    name: "day-of-week",
    lo: 0,
    hi: 7,
};

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const WEEKDAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
/// Longest month (leap years included), January first.
const MONTH_DAYS: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

const FIELDS_HELP: &str = "use 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds first), or @yearly, @annually, @monthly, @weekly, @daily, @hourly";

/// A parsed field: its normalized text and the values it selects.
struct Parsed {
    text: String,
    values: Vec<u32>,
    star: bool,
}

impl Field {
    fn range(&self) -> String {
        format!("{}-{}", self.lo, self.hi)
    }

    /// "minute field '61'" or "minute field '1,61'".
    fn at(&self, text: &str) -> String {
        format!("{} field '{text}'", self.name)
    }

    fn names(&self) -> &'static [&'static str] {
        match self.kind {
            Kind::Month => &MONTHS,
            Kind::DayOfWeek => &WEEKDAYS,
            _ => &[],
        }
    }

    /// The number or name `tok` (`end`: the end of a range, where `SUN` is 7).
    fn value(&self, text: &str, tok: &str, end: bool) -> Result<u32, String> {
        let out_of_range = || {
            if tok == text {
                format!("{} out of range {}", self.at(text), self.range())
            } else {
                format!("{}: '{tok}' out of range {}", self.at(text), self.range())
            }
        };
        if !tok.is_empty() && tok.bytes().all(|b| b.is_ascii_digit()) {
            // More than 3 digits is out of range whatever the value (no overflow).
            if tok.len() > 3 {
                return Err(out_of_range());
            }
            let v: u32 = tok.parse().map_err(|_| out_of_range())?;
            if v < self.lo || v > self.hi {
                return Err(out_of_range());
            }
            return Ok(v);
        }
        if !tok.is_empty() && tok.bytes().all(|b| b.is_ascii_alphabetic()) {
            let names = self.names();
            if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(tok)) {
                let v = i as u32 + if self.kind == Kind::Month { 1 } else { 0 };
                return Ok(if self.kind == Kind::DayOfWeek && v == 0 && end {
                    7
                } else {
                    v
                });
            }
            return Err(if names.is_empty() {
                format!(
                    "{}: unknown name '{tok}' (this field takes numbers {})",
                    self.at(text),
                    self.range()
                )
            } else {
                format!(
                    "{}: unknown name '{tok}' (use {}-{} or {}-{})",
                    self.at(text),
                    names[0],
                    names[names.len() - 1],
                    self.lo,
                    self.hi
                )
            });
        }
        if tok.starts_with('-') {
            return Err(format!(
                "{}: negative number '{tok}' out of range {}",
                self.at(text),
                self.range()
            ));
        }
        Err(format!(
            "{}: '{tok}' is not a number in {} (POSIX cron: N, A-B, */S, A-B/S, lists A,B{}; L, W and # are not supported)",
            self.at(text),
            self.range(),
            if self.names().is_empty() {
                ""
            } else {
                " and names"
            }
        ))
    }

    fn parse(&self, text: &str) -> Result<Parsed, String> {
        let mut items = Vec::new();
        let mut values = Vec::new();
        for item in text.split(',') {
            if item.is_empty() {
                return Err(format!("{}: empty list item", self.at(text)));
            }
            let (base, step) = match item.split_once('/') {
                Some((b, s)) => (b, Some(s)),
                None => (item, None),
            };
            let span = self.hi - self.lo;
            let step = match step {
                None => None,
                Some(s) => {
                    let n =
                        (!s.is_empty() && s.len() <= 3 && s.bytes().all(|b| b.is_ascii_digit()))
                            .then(|| s.parse::<u32>().ok())
                            .flatten();
                    match n {
                        Some(n) if (1..=span).contains(&n) => Some(n),
                        _ => {
                            return Err(format!(
                                "{}: step '{s}' out of range 1-{span}",
                                self.at(text)
                            ));
                        }
                    }
                }
            };
            let (a, b, norm) = if base == "*" || base == "?" {
                if base == "?" && !matches!(self.kind, Kind::DayOfMonth | Kind::DayOfWeek) {
                    return Err(format!(
                        "{}: '?' is only allowed in the day-of-month and day-of-week fields (range {})",
                        self.at(text),
                        self.range()
                    ));
                }
                (self.lo, self.hi, "*".to_string())
            } else if base.starts_with('-') {
                return Err(format!(
                    "{}: negative number '{base}' out of range {}",
                    self.at(text),
                    self.range()
                ));
            } else if let Some((x, y)) = base.split_once('-') {
                let a = self.value(text, x, false)?;
                let b = self.value(text, y, true)?;
                if a > b {
                    return Err(format!(
                        "{}: range '{base}' is reversed (start after end; allowed {})",
                        self.at(text),
                        self.range()
                    ));
                }
                (a, b, format!("{a}-{b}"))
            } else {
                let v = self.value(text, base, false)?;
                if let Some(s) = step {
                    return Err(format!(
                        "{}: '{item}' steps need a range or '*' (e.g. '{v}-{}/{s}' or '*/{s}'; allowed {})",
                        self.at(text),
                        self.hi,
                        self.range()
                    ));
                }
                (v, v, v.to_string())
            };
            let s = step.unwrap_or(1);
            values.extend((a..=b).step_by(s as usize));
            items.push(match step {
                Some(s) => format!("{norm}/{s}"),
                None => norm,
            });
        }
        // Sunday is 0 and 7.
        if self.kind == Kind::DayOfWeek {
            for v in values.iter_mut() {
                if *v == 7 {
                    *v = 0;
                }
            }
        }
        values.sort_unstable();
        values.dedup();
        let text = items.join(",");
        let star = text == "*";
        Ok(Parsed { text, values, star })
    }
}

/// Checks `expr` and returns the numeric 6-field form croner evaluates
/// (seconds first). The message of an error names the field and its range,
/// without a field prefix (callers add `schedule.cron: `).
pub fn normalize(expr: &str) -> Result<String, String> {
    if expr.len() > MAX_LEN {
        return Err(format!("longer than {MAX_LEN} characters"));
    }
    let t = expr.trim();
    if t.is_empty() {
        return Err(format!("is empty; {FIELDS_HELP}"));
    }
    let t = match t.strip_prefix('@') {
        Some(m) => match m.to_ascii_lowercase().as_str() {
            "yearly" | "annually" => "0 0 1 1 *",
            "monthly" => "0 0 1 * *",
            "weekly" => "0 0 * * 0",
            "daily" => "0 0 * * *",
            "hourly" => "0 * * * *",
            _ => return Err(format!("unknown macro '{t}'; {FIELDS_HELP}")),
        },
        None => t,
    };
    let parts: Vec<&str> = t.split_whitespace().collect();
    let fields: &[Field] = match parts.len() {
        5 => &[MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK],
        6 => &[SECOND, MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK],
        n => return Err(format!("'{expr}' has {n} fields; {FIELDS_HELP}")),
    };
    let mut out: Vec<String> = Vec::with_capacity(6);
    if parts.len() == 5 {
        out.push("0".into());
    }
    let mut dom = None;
    let mut month = None;
    let mut dow_star = true;
    for (f, p) in fields.iter().zip(&parts) {
        let parsed = f.parse(p)?;
        match f.kind {
            Kind::DayOfMonth => dom = Some((parsed.values.clone(), parsed.star)),
            Kind::Month => month = Some(parsed.values.clone()),
            Kind::DayOfWeek => dow_star = parsed.star,
            _ => {}
        }
        out.push(parsed.text);
    }
    // With a restricted day of week (and a restricted day of month) a day
    // matching either fires, so only the day of month alone can be impossible.
    if let (Some((days, false)), Some(months), true) = (dom, month, dow_star) {
        let first = days.first().copied().unwrap_or(1);
        let possible = months
            .iter()
            .any(|&m| first <= MONTH_DAYS[(m as usize).saturating_sub(1) % 12]);
        if !possible {
            let names: Vec<&str> = months
                .iter()
                .map(|&m| MONTHS[(m as usize).saturating_sub(1) % 12])
                .collect();
            return Err(format!(
                "'{expr}' never fires within 5 years: day-of-month field '{}' names no day that {} has",
                parts[parts.len() - 3],
                names.join(", ")
            ));
        }
    }
    Ok(out.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::CronSpec;

    /// 2026-12-06T00:00:00Z.
    const NOW_MS: i64 = 1_796_515_200_000;

    /// Every one must be refused, with the message naming what is wrong.
    const BAD: &[(&str, &str)] = &[
        // out-of-range fields
        ("61 * * * *", "minute field '61' out of range 0-59"),
        ("60 * * * *", "minute field '60' out of range 0-59"),
        ("0 24 * * *", "hour field '24' out of range 0-23"),
        ("0 0 0 * *", "day-of-month field '0' out of range 1-31"),
        ("0 0 32 * *", "day-of-month field '32' out of range 1-31"),
        ("0 0 * 13 *", "month field '13' out of range 1-12"),
        ("0 0 * 0 *", "month field '0' out of range 1-12"),
        ("0 0 * * 8", "day-of-week field '8' out of range 0-7"),
        ("60 0 0 * * *", "second field '60' out of range 0-59"),
        (
            "1,61 * * * *",
            "minute field '1,61': '61' out of range 0-59",
        ),
        (
            "0-60 * * * *",
            "minute field '0-60': '60' out of range 0-59",
        ),
        // wrong field counts
        ("* * * *", "has 4 fields"),
        ("*", "has 1 fields"),
        ("0 0 * * * * 2027", "has 7 fields"),
        ("0 0 0 * * * * *", "has 8 fields"),
        // garbage and empty
        ("", "is empty"),
        ("   ", "is empty"),
        ("every day at noon", "has 4 fields"),
        ("a b c d e", "minute field 'a': unknown name 'a'"),
        ("0 0 * * * ;rm", "day-of-week field ';rm'"),
        ("* * * * $", "day-of-week field '$'"),
        ("0,,5 * * * *", "minute field '0,,5': empty list item"),
        ("*/ * * * *", "minute field '*/': step '' out of range 1-59"),
        // steps of 0 and oversized steps
        (
            "*/0 * * * *",
            "minute field '*/0': step '0' out of range 1-59",
        ),
        (
            "0 */0 * * *",
            "hour field '*/0': step '0' out of range 1-23",
        ),
        (
            "0 0 1-10/0 * *",
            "day-of-month field '1-10/0': step '0' out of range 1-30",
        ),
        (
            "*/100 * * * *",
            "minute field '*/100': step '100' out of range 1-59",
        ),
        (
            "5/15 * * * *",
            "minute field '5/15': '5/15' steps need a range or '*'",
        ),
        // reversed ranges
        (
            "30-10 * * * *",
            "minute field '30-10': range '30-10' is reversed",
        ),
        (
            "0 20-5 * * *",
            "hour field '20-5': range '20-5' is reversed",
        ),
        (
            "0 0 * DEC-JAN *",
            "month field 'DEC-JAN': range 'DEC-JAN' is reversed",
        ),
        (
            "0 0 * * FRI-MON",
            "day-of-week field 'FRI-MON': range 'FRI-MON' is reversed",
        ),
        // impossible dates
        ("0 0 31 2 *", "'0 0 31 2 *' never fires within 5 years"),
        ("0 0 30 2 *", "'0 0 30 2 *' never fires within 5 years"),
        ("0 0 31 4 *", "'0 0 31 4 *' never fires within 5 years"),
        ("0 0 31 4,6,9,11 *", "never fires within 5 years"),
        ("0 0 30-31 FEB *", "never fires within 5 years"),
        ("0 0 0 31 2 *", "never fires within 5 years"),
        // unknown names and names in the wrong field
        (
            "0 0 * FOO *",
            "month field 'FOO': unknown name 'FOO' (use JAN-DEC or 1-12)",
        ),
        (
            "0 0 * * FUNDAY",
            "day-of-week field 'FUNDAY': unknown name 'FUNDAY'",
        ),
        ("0 0 * MON *", "month field 'MON': unknown name 'MON'"),
        ("0 0 * * JAN", "day-of-week field 'JAN': unknown name 'JAN'"),
        ("JAN 0 * * *", "minute field 'JAN': unknown name 'JAN'"),
        ("@reboot", "unknown macro '@reboot'"),
        ("@every 5m", "unknown macro '@every 5m'"),
        ("@daily 0", "unknown macro '@daily 0'"),
        // trailing junk and extensions
        ("0 0 * * *x", "day-of-week field '*x'"),
        ("0 0 * * 1x", "day-of-week field '1x'"),
        ("0 0 L * *", "day-of-month field 'L': unknown name 'L'"),
        ("0 0 * * 1#2", "day-of-week field '1#2'"),
        ("0 0 15W * *", "day-of-month field '15W'"),
        ("0 ? * * *", "hour field '?': '?' is only allowed"),
        // huge numbers
        (
            "99999999999999999999 * * * *",
            "minute field '99999999999999999999' out of range 0-59",
        ),
        (
            "0 4294967296 * * *",
            "hour field '4294967296' out of range 0-23",
        ),
        (
            "*/4294967297 * * * *",
            "step '4294967297' out of range 1-59",
        ),
        // negative numbers
        (
            "-1 * * * *",
            "minute field '-1': negative number '-1' out of range 0-59",
        ),
        (
            "0 -5 * * *",
            "hour field '-5': negative number '-5' out of range 0-23",
        ),
        (
            "0 0 * * -0",
            "day-of-week field '-0': negative number '-0' out of range 0-7",
        ),
        (
            "*/-1 * * * *",
            "minute field '*/-1': step '-1' out of range 1-59",
        ),
    ];

    const GOOD: &[(&str, &str)] = &[
        ("* * * * *", "0 * * * * *"),
        ("0 2 * * *", "0 0 2 * * *"),
        ("30 2 * * 1-5", "0 30 2 * * 1-5"),
        ("*/15 * * * *", "0 */15 * * * *"),
        ("0 0-23/6 * * *", "0 0 0-23/6 * * *"),
        ("0 0 1,15 * *", "0 0 0 1,15 * *"),
        ("0 0 29 2 *", "0 0 0 29 2 *"),
        ("0 0 31 1-12 *", "0 0 0 31 1-12 *"),
        ("0 0 31 2,3 *", "0 0 0 31 2,3 *"),
        ("0 0 31 2 MON", "0 0 0 31 2 1"),
        ("0 0 * jan-mar mon-fri", "0 0 0 * 1-3 1-5"),
        ("0 0 * * FRI-SUN", "0 0 0 * * 5-7"),
        ("0 0 * * 7", "0 0 0 * * 7"),
        ("0 0 ? * 0", "0 0 0 * * 0"),
        ("59 23 31 12 *", "0 59 23 31 12 *"),
        ("*/10 * * * * *", "*/10 * * * * *"),
        ("  0   3 * * *  ", "0 0 3 * * *"),
        ("@daily", "0 0 0 * * *"),
        ("@hourly", "0 0 * * * *"),
        ("@weekly", "0 0 0 * * 0"),
        ("@monthly", "0 0 0 1 * *"),
        ("@yearly", "0 0 0 1 1 *"),
        ("@ANNUALLY", "0 0 0 1 1 *"),
    ];

    #[test]
    fn bad_crons_are_refused_naming_field_and_range() {
        assert!(BAD.len() >= 40, "{} bad expressions", BAD.len());
        for (expr, want) in BAD {
            let e = normalize(expr).expect_err(expr);
            assert!(e.contains(want), "'{expr}': got '{e}', want '{want}'");
            // What the gRPC service answers: the field of the request, too.
            let e = CronSpec::parse(expr, "UTC").expect_err(expr).to_string();
            assert!(e.contains("schedule.cron: "), "'{expr}': {e}");
            assert!(e.contains(want), "'{expr}': {e}");
        }
    }

    #[test]
    fn good_crons_are_accepted_and_fire() {
        for (expr, want) in GOOD {
            assert_eq!(normalize(expr).as_deref(), Ok(*want), "'{expr}'");
            let c = CronSpec::parse(expr, "Europe/Berlin").expect(expr);
            let next = c.next_after(NOW_MS).expect(expr);
            assert!(next > NOW_MS, "'{expr}'");
            c.check_fires(expr, NOW_MS).expect(expr);
        }
        // 29 Feb fires in the next leap year: 2028-02-29T00:00Z.
        let c = CronSpec::parse("0 0 29 2 *", "UTC").unwrap();
        assert_eq!(c.next_after(NOW_MS), Some(1_835_395_200_000));
        // Names map to the numbers croner would not misread: Monday, not January.
        let c = CronSpec::parse("0 0 * * MON", "UTC").unwrap();
        // 2026-12-07 is a Monday.
        assert_eq!(c.next_after(NOW_MS), Some(1_796_601_600_000));
    }

    #[test]
    fn a_cron_firing_beyond_the_horizon_is_refused() {
        // 29 Feb from 2097-03-01: 2100 is no leap year, the next is 2104.
        let from = 4_012_934_400_000; // 2097-03-01T00:00Z
        let c = CronSpec::parse("0 0 29 2 *", "UTC").unwrap();
        let e = c.check_fires("0 0 29 2 *", from).unwrap_err().to_string();
        assert_eq!(e, "schedule.cron: '0 0 29 2 *' never fires within 5 years");
    }
}
