//! Slurm hostlist expressions (`n[1-4,7]`, `gpu[01-16]`, `r[1-2]n[1-3]`,
//! `login1,n[1-2]`) expanded into node names, as `scontrol show hostnames`
//! does: a comma at the top level separates items, a bracket holds a
//! comma-separated list of numbers and ranges, a range keeps the width of
//! its lower bound (`[08-10]` gives `08 09 10`), several brackets in one item
//! multiply. Every name is checked like any node name benchlake hands to
//! Slurm ([`crate::scontrol::check_node_name`]) and an expression names at
//! most [`MAX_HOSTS`] nodes.

/// Nodes an expression may name at most.
pub const MAX_HOSTS: usize = 65_536;

/// Why an expression was refused.
#[derive(Debug, thiserror::Error)]
pub enum HostlistError {
    #[error("'{expr}' is not a hostlist expression: {why}")]
    Syntax { expr: String, why: String },
    #[error("'{expr}' names more than {MAX_HOSTS} nodes")]
    TooMany { expr: String },
    #[error("'{expr}': {source}")]
    Name {
        expr: String,
        source: crate::scontrol::ScontrolError,
    },
}

/// One piece of an item: literal text or the alternatives of a bracket.
enum Piece {
    Lit(String),
    Set(Vec<String>),
}

/// The node names of `expr`, in the expression's order, without repeats.
pub fn expand(expr: &str) -> Result<Vec<String>, HostlistError> {
    let syntax = |why: &str| HostlistError::Syntax {
        expr: expr.escape_default().to_string(),
        why: why.to_string(),
    };
    if expr.trim().is_empty() {
        return Err(syntax("empty"));
    }
    if expr.len() > 4096 {
        return Err(syntax("longer than 4096 characters"));
    }
    // Split at top-level commas.
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, ch) in expr.char_indices() {
        match ch {
            '[' if depth == 0 => depth = 1,
            '[' => return Err(syntax("nested '['")),
            ']' if depth == 1 => depth = 0,
            ']' => return Err(syntax("']' without '['")),
            ',' if depth == 0 => {
                items.push(&expr[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(syntax("'[' without ']'"));
    }
    items.push(&expr[start..]);
    let mut out: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for item in items {
        let item = item.trim();
        if item.is_empty() {
            return Err(syntax("an empty item"));
        }
        let mut pieces = Vec::new();
        let mut rest = item;
        while let Some(open) = rest.find('[') {
            if open > 0 {
                pieces.push(Piece::Lit(rest[..open].to_string()));
            }
            let close = rest[open..]
                .find(']')
                .map(|c| open + c)
                .ok_or_else(|| syntax("'[' without ']'"))?;
            pieces.push(Piece::Set(
                ranges(&rest[open + 1..close]).map_err(|w| syntax(&w))?,
            ));
            rest = &rest[close + 1..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Lit(rest.to_string()));
        }
        let mut names = vec![String::new()];
        for p in &pieces {
            names = match p {
                Piece::Lit(s) => names.into_iter().map(|n| n + s).collect(),
                Piece::Set(alts) => {
                    if names.len().saturating_mul(alts.len()) > MAX_HOSTS {
                        return Err(HostlistError::TooMany {
                            expr: expr.escape_default().to_string(),
                        });
                    }
                    names
                        .iter()
                        .flat_map(|n| alts.iter().map(move |a| format!("{n}{a}")))
                        .collect()
                }
            };
        }
        for n in names {
            crate::scontrol::check_node_name(&n).map_err(|source| HostlistError::Name {
                expr: expr.escape_default().to_string(),
                source,
            })?;
            if seen.insert(n.clone()) {
                out.push(n);
                if out.len() > MAX_HOSTS {
                    return Err(HostlistError::TooMany {
                        expr: expr.escape_default().to_string(),
                    });
                }
            }
        }
    }
    Ok(out)
}

/// The numbers of a bracket's body (`1-4,7`, `08-10`), as text.
fn ranges(body: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for part in body.split(',') {
        let part = part.trim();
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let digits =
            |s: &str| !s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(lo) || !digits(hi) {
            return Err(format!(
                "'[{body}]': '{part}' is not a number or a range like 1-4"
            ));
        }
        let (a, b): (u64, u64) = (
            lo.parse().map_err(|_| format!("'{lo}' is not a number"))?,
            hi.parse().map_err(|_| format!("'{hi}' is not a number"))?,
        );
        if b < a {
            return Err(format!("'[{body}]': the range {part} runs backwards"));
        }
        if (b - a) as usize >= MAX_HOSTS || out.len() + ((b - a) as usize) >= MAX_HOSTS {
            return Err(format!("'[{body}]' names more than {MAX_HOSTS} numbers"));
        }
        let width = lo.len();
        for x in a..=b {
            out.push(format!("{x:0width$}"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expressions_expand_like_scontrol_show_hostnames() {
        assert_eq!(expand("n[1-4]").unwrap(), ["n1", "n2", "n3", "n4"]);
        assert_eq!(
            expand("login1,n[1-2,7]").unwrap(),
            ["login1", "n1", "n2", "n7"]
        );
        assert_eq!(expand("gpu[08-10]").unwrap(), ["gpu08", "gpu09", "gpu10"]);
        assert_eq!(
            expand("r[1-2]n[1-2]-ib").unwrap(),
            ["r1n1-ib", "r1n2-ib", "r2n1-ib", "r2n2-ib"]
        );
        assert_eq!(expand("n1,n1,n[1-2]").unwrap(), ["n1", "n2"]);
        assert_eq!(expand("n3").unwrap(), ["n3"]);
    }

    #[test]
    fn bad_expressions_are_refused_with_why() {
        for (e, why) in [
            ("", "empty"),
            ("n[1-4", "without ']'"),
            ("n1-4]", "without '['"),
            ("n[[1]]", "nested"),
            ("n[4-1]", "backwards"),
            ("n[a-b]", "not a number"),
            ("n1,,n2", "empty item"),
            ("n[]", "not a number"),
            ("-n[1-2]", "starts with '-'"),
            ("n[1-2];rm", "only letters"),
            ("n[0-99999]", "more than"),
            ("a[0-999]b[0-999]", "more than"),
        ] {
            let err = expand(e).unwrap_err().to_string();
            assert!(err.contains(why), "{e}: {err}");
        }
    }
}
