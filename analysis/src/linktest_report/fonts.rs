//! Fonts for the PNG and text measuring for the layout.
//!
//! DejaVu Sans (regular and bold, `analysis/assets/`, Bitstream Vera licence
//! beside it) is built into the binary, so the PNG has text on any machine.
//! The system's fonts are loaded as well, for glyphs DejaVu Sans lacks. The
//! generic families the page uses (`sans-serif`, and `monospace`/`serif` for
//! foreign SVGs) map to DejaVu — fontdb's defaults (Arial, Courier New, Times
//! New Roman) are rarely installed on Linux, which left the PNG without text.
//!
//! The layout measures text with the same font's advance widths (kerning
//! ignored, which errs on the wide side), so labels are shortened to fit
//! where the renderer will draw them.
use std::sync::{Arc, OnceLock};

use resvg::usvg::fontdb;

static DEJAVU_SANS: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");
static DEJAVU_SANS_BOLD: &[u8] = include_bytes!("../../assets/DejaVuSans-Bold.ttf");

/// The family the page is drawn in.
pub const FAMILY: &str = "DejaVu Sans";

/// The font database: the embedded DejaVu Sans and the system's fonts, with the
/// generic families mapped to DejaVu.
pub fn database() -> Arc<fontdb::Database> {
    static DB: OnceLock<Arc<fontdb::Database>> = OnceLock::new();
    DB.get_or_init(|| {
        let mut db = fontdb::Database::new();
        db.load_system_fonts();
        let system = db.len();
        for data in [DEJAVU_SANS, DEJAVU_SANS_BOLD] {
            db.load_font_source(fontdb::Source::Binary(Arc::new(data)));
        }
        let has = |db: &fontdb::Database, family: &str| {
            db.faces()
                .any(|f| f.families.iter().any(|(name, _)| name == family))
        };
        db.set_sans_serif_family(FAMILY);
        let mono = if has(&db, "DejaVu Sans Mono") {
            "DejaVu Sans Mono"
        } else {
            FAMILY
        };
        db.set_monospace_family(mono);
        let serif = if has(&db, "DejaVu Serif") {
            "DejaVu Serif"
        } else {
            FAMILY
        };
        db.set_serif_family(serif);
        if db.len() < system + 2 {
            tracing::warn!("the embedded report font did not load: the PNG may have no text");
        }
        tracing::debug!(system_faces = system, "report fonts loaded");
        Arc::new(db)
    })
    .clone()
}

/// usvg options that resolve the page's fonts (as [`super::render_png`] uses them).
pub fn usvg_options() -> resvg::usvg::Options<'static> {
    resvg::usvg::Options {
        fontdb: database(),
        font_family: FAMILY.into(),
        ..Default::default()
    }
}

/// Advance widths (in em) of the embedded faces: ASCII cached, the rest looked up.
struct Metrics {
    faces: [Option<ttf_parser::Face<'static>>; 2],
    ascii: [[f32; 128]; 2],
}

fn metrics() -> &'static Metrics {
    static M: OnceLock<Metrics> = OnceLock::new();
    M.get_or_init(|| {
        let faces = [
            ttf_parser::Face::parse(DEJAVU_SANS, 0).ok(),
            ttf_parser::Face::parse(DEJAVU_SANS_BOLD, 0).ok(),
        ];
        let mut ascii = [[0.6f32; 128]; 2];
        for (k, face) in faces.iter().enumerate() {
            if let Some(f) = face {
                for (c, w) in ascii[k].iter_mut().enumerate() {
                    if let Some(a) = advance(f, char::from(c as u8)) {
                        *w = a;
                    }
                }
            }
        }
        Metrics { faces, ascii }
    })
}

fn advance(face: &ttf_parser::Face<'_>, c: char) -> Option<f32> {
    let g = face.glyph_index(c)?;
    let a = face.glyph_hor_advance(g)?;
    Some(f32::from(a) / f32::from(face.units_per_em()))
}

/// Width of `s` drawn at `size` px, in px.
pub fn text_width(s: &str, size: f64, bold: bool) -> f64 {
    let m = metrics();
    let k = usize::from(bold);
    let em: f32 = s
        .chars()
        .map(|c| {
            if c.is_ascii() {
                m.ascii[k][c as usize]
            } else {
                m.faces[k]
                    .as_ref()
                    .and_then(|f| advance(f, c))
                    .unwrap_or(0.6)
            }
        })
        .sum();
    f64::from(em) * size
}

/// Where a shortened text keeps its characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// The beginning (`node0001.clus…`): host names.
    Start,
    /// The end (`…/np16/pingpong_results_bin.sion`): paths and titles.
    End,
}

/// `s`, shortened with an ellipsis when it is wider than `max_w` px.
pub fn fit(s: &str, size: f64, bold: bool, max_w: f64, keep: Keep) -> String {
    if text_width(s, size, bold) <= max_w {
        return s.to_string();
    }
    let chars: Vec<char> = s.chars().collect();
    let budget = max_w - text_width("…", size, bold);
    let mut w = 0.0;
    let mut n = 0;
    let widths: Box<dyn Iterator<Item = &char>> = match keep {
        Keep::Start => Box::new(chars.iter()),
        Keep::End => Box::new(chars.iter().rev()),
    };
    for c in widths {
        let cw = text_width(c.encode_utf8(&mut [0; 4]), size, bold);
        if w + cw > budget {
            break;
        }
        w += cw;
        n += 1;
    }
    match keep {
        Keep::Start => format!("{}…", chars[..n].iter().collect::<String>()),
        Keep::End => format!("…{}", chars[chars.len() - n..].iter().collect::<String>()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_font_measures_and_fits() {
        // DejaVu Sans: "0" is 1303/2048 em wide.
        let w = text_width("0000", 10.0, false);
        assert!((w - 4.0 * 10.0 * 1303.0 / 2048.0).abs() < 1e-3, "{w}");
        assert!(text_width("node", 10.0, true) > text_width("node", 10.0, false));
        let long = "/a/very/long/path/to/the/file/pingpong_results_bin.sion";
        let f = fit(long, 12.0, false, 150.0, Keep::End);
        assert!(f.starts_with('…') && f.ends_with("bin.sion"), "{f}");
        assert!(text_width(&f, 12.0, false) <= 150.0);
        let f = fit(
            "node0001.cluster.example.org",
            10.0,
            false,
            60.0,
            Keep::Start,
        );
        assert!(f.starts_with("node") && f.ends_with('…'), "{f}");
        assert_eq!(fit("vm", 10.0, false, 60.0, Keep::Start), "vm");
        let db = database();
        let q = fontdb::Query {
            families: &[fontdb::Family::SansSerif],
            ..Default::default()
        };
        assert!(db.query(&q).is_some(), "sans-serif resolves to a face");
    }
}
