//! The read-only web dashboard, served by the coordinator's HTTP listener
//! ([`crate::http`]) under `/` (docs/dashboard.md).
//!
//! - Pages ([`pages`]): `/` (health overview), `/runs` (filtered, paginated
//!   run list), `/runs/{id}` (one run); `/api/runs/{id}` is the JSON a
//!   running run's page polls every 2 s. Later views (LinkTest, I/O trends,
//!   alltoallv, replay) slot in as `/runs/{id}/{view}` and top-level routes
//!   listed in [`NAV`].
//! - Every page is rendered on the server; every dynamic value goes through
//!   [`html::esc`]. No inline script: the one script is `/static/dashboard.js`,
//!   and every response carries a Content-Security-Policy of `default-src
//!   'self'` ([`security_headers`]). Assets are compiled into the binary.
//! - Access: when the coordinator has tokens, a page needs a session: `/login`
//!   takes a user or admin token (a form POST; failures spend the peer's budget
//!   in [`crate::auth::Guard`]) and sets a cookie holding a random session id
//!   (never the token) mapped here to the role with an expiry ([`Sessions`]).
//!   Without tokens (the demo) no login is needed.
//! - Cross-site requests: every state-changing request (`/login`, `/logout`,
//!   any later admin action) must come from the dashboard's own origin
//!   ([`origin`], one layer over the whole HTTP router).
//! - Data: the state store in one read transaction per page, and the
//!   verdicts kept in memory ([`crate::verdicts`]); no page reads Parquet.
pub mod actions;
pub mod alltoallv;
pub mod audit;
pub mod cache;
pub mod html;
pub mod io;
pub mod links;
pub mod linktest;
pub mod linktest_hosts;
pub mod linktest_pairs;
pub mod linktest_svg;
pub mod node;
pub mod oidc;
pub mod origin;
pub mod pages;
pub mod replay;
pub mod silences;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use benchlake_proto::obs::PeerInfo;
use rand::RngCore;

use crate::config::{Identity, Role};
use crate::http::Http;

/// The top navigation: (path, label). Later pages add their entry here.
pub const NAV: &[(&str, &str)] = &[
    ("/", "Health"),
    ("/runs", "Runs"),
    ("/io", "I/O trends"),
    ("/silences", "Silenced"),
    ("/audit", "Audit"),
];

/// The [`NAV`] entries only admins see (their pages answer 403 to users).
pub const ADMIN_NAV: &[&str] = &["/audit"];

/// The page of a run's view that shows `table` (see `pages::VIEWS`), when
/// there is one.
pub fn view_link(table: &str, run: &crate::model::RunRow) -> Option<String> {
    match table {
        "linktest_timings" => Some(format!("/runs/{}/linktest", run.run_id)),
        "io_results" => Some(io::link_of(run)),
        "replays" => Some(format!("/runs/{}/replay", run.run_id)),
        "alltoallv_patterns" => Some(format!("/runs/{}/alltoallv", run.run_id)),
        _ => None,
    }
}

/// The session cookie's name.
pub const COOKIE: &str = "benchlake_session";
/// How long a session lasts after login.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Sessions kept at most (the ones closest to expiry are dropped beyond).
const MAX_SESSIONS: usize = 10_000;

const CSS: &str = include_str!("static/dashboard.css");
const JS: &str = include_str!("static/dashboard.js");
const ICON: &str = include_str!("static/favicon.svg");

/// One login: who, the token its forms carry against cross-site requests
/// ([`actions`]), and when it ends.
#[derive(Debug, Clone)]
struct Session {
    id: Identity,
    csrf: String,
    expires: Instant,
}

/// Server-side sessions: random id → [`Session`]; and the form token of the
/// dashboard when no tokens are configured (no login, no session: one
/// random token per coordinator process).
#[derive(Debug)]
pub struct Sessions {
    map: Mutex<HashMap<String, Session>>,
    anon_csrf: String,
}

impl Default for Sessions {
    fn default() -> Self {
        Self {
            map: Mutex::default(),
            anon_csrf: random_hex(),
        }
    }
}

/// 256 random bits as 64 hex digits.
fn random_hex() -> String {
    let mut b = [0u8; 32];
    rand::rng().fill_bytes(&mut b);
    hex::encode(b)
}

impl Sessions {
    /// A new session of `id`; returns its id (64 hex digits, 256 random
    /// bits). Its form token is another 256 random bits.
    pub fn create(&self, id: Identity) -> String {
        let sid = random_hex();
        let now = Instant::now();
        let mut m = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() >= MAX_SESSIONS {
            m.retain(|_, s| s.expires > now);
        }
        if m.len() >= MAX_SESSIONS
            && let Some(k) = m
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(k, _)| k.clone())
        {
            m.remove(&k);
        }
        m.insert(
            sid.clone(),
            Session {
                id,
                csrf: random_hex(),
                expires: now + SESSION_TTL,
            },
        );
        sid
    }

    /// The role of session `id` while it has not expired.
    pub fn get(&self, id: &str) -> Option<Role> {
        self.identity(id).map(|(i, _)| i.role)
    }

    /// The identity and form token of session `id` while it has not expired.
    pub fn identity(&self, id: &str) -> Option<(Identity, String)> {
        let mut m = self.map.lock().unwrap_or_else(|p| p.into_inner());
        match m.get(id) {
            Some(s) if s.expires > Instant::now() => Some((s.id.clone(), s.csrf.clone())),
            Some(_) => {
                m.remove(id);
                None
            }
            None => None,
        }
    }

    /// The form token when no tokens are configured.
    pub fn anonymous_csrf(&self) -> &str {
        &self.anon_csrf
    }

    /// Ends session `id`.
    pub fn remove(&self, id: &str) {
        let mut m = self.map.lock().unwrap_or_else(|p| p.into_inner());
        m.remove(id);
    }
}

/// Who a dashboard request comes from and its form token: the anonymous
/// admin without tokens, else the session's identity (None: no session).
pub fn identity(h: &Http, headers: &HeaderMap) -> Option<(Identity, String)> {
    if !h.login_required() {
        return Some((
            Identity::anonymous_admin(),
            h.sessions().anonymous_csrf().to_string(),
        ));
    }
    cookie_session(headers).and_then(|id| h.sessions().identity(&id))
}

/// The dashboard's routes (merged into [`Http::router`]).
pub fn router(h: Http) -> Router {
    Router::new()
        .route("/", get(pages::overview))
        .route("/runs", get(pages::runs))
        .route("/runs/{id}", get(pages::run))
        .route("/nodes/{node}", get(node::page))
        .route("/api/runs/{id}", get(pages::run_json))
        .route("/io", get(io::page))
        .route("/silences", get(silences::page))
        .route("/runs/{id}/linktest", get(linktest::page))
        .route("/runs/{id}/replay", get(replay::page))
        .route("/runs/{id}/alltoallv", get(alltoallv::page))
        .route(
            "/runs/{id}/alltoallv/heatmap.png",
            get(alltoallv::heatmap_png),
        )
        .route("/runs/{id}/linktest/matrix.png", get(linktest::matrix_png))
        .route("/api/runs/{id}/linktest/pair", get(linktest::pair_json))
        .route("/audit", get(audit::page))
        .route("/schedules/{name}/trigger", post(actions::trigger_schedule))
        .route("/schedules/{name}/pause", post(actions::pause_schedule))
        .route("/schedules/{name}/resume", post(actions::resume_schedule))
        .route("/runs/{id}/cancel", post(actions::cancel_run))
        .route("/runs/{id}/rerun", post(actions::rerun_run))
        .route("/agents/{name}/drain", post(actions::drain_agent))
        .route("/agents/{name}/resume", post(actions::resume_agent))
        .route("/nodes/{node}/drain", post(actions::drain_node))
        .route("/nodes/{node}/resume", post(actions::resume_node))
        .route("/login", get(login_page).post(login))
        .route("/login/oidc", get(oidc::start))
        .route(crate::oidc::CALLBACK_PATH, get(oidc::callback))
        .route("/logout", post(logout))
        .route("/static/dashboard.css", get(css))
        .route("/static/dashboard.js", get(js))
        .route("/static/favicon.svg", get(icon))
        .route("/favicon.ico", get(icon))
        .fallback(not_found)
        .layer(axum::middleware::map_response(security_headers))
        .with_state(h)
}

/// Headers on every dashboard response: the CSP (no inline script, no
/// framing), nosniff, no referrer to other sites (`same-origin`: a browser
/// then sends the dashboard's own origin on its forms' POSTs, which
/// [`origin::same_origin`] requires; `no-referrer` would make it send
/// `Origin: null`), and no caching of pages.
async fn security_headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    r
}

async fn css() -> Response {
    asset("text/css; charset=utf-8", CSS)
}

async fn js() -> Response {
    asset("text/javascript; charset=utf-8", JS)
}

async fn icon() -> Response {
    asset("image/svg+xml", ICON)
}

fn asset(ct: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, ct),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        body,
    )
        .into_response()
}

async fn not_found(State(h): State<Http>, headers: HeaderMap) -> Response {
    let page = html::page(
        "Not found",
        "",
        &html::Chrome::of(&h, &headers),
        "<h1>Not found</h1><p>No such page. <a href=\"/\">Health overview</a></p>",
    );
    (StatusCode::NOT_FOUND, axum::response::Html(page)).into_response()
}

/// The `Set-Cookie` value of session `id` (empty with `max_age` 0: clears
/// it): HttpOnly, SameSite=Strict, Path=/, and Secure over TLS.
pub fn session_cookie(id: &str, max_age: u64, secure: bool) -> String {
    format!(
        "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age}{}",
        if secure { "; Secure" } else { "" }
    )
}

/// The session id of a request's cookie, when well-formed.
fn cookie_session(headers: &HeaderMap) -> Option<String> {
    for v in headers.get_all(header::COOKIE) {
        let Ok(v) = v.to_str() else { continue };
        for part in v.split(';') {
            if let Some(id) = part
                .trim()
                .strip_prefix(COOKIE)
                .and_then(|r| r.strip_prefix('='))
                && id.len() == 64
                && id.bytes().all(|b| b.is_ascii_hexdigit())
            {
                return Some(id.to_string());
            }
        }
    }
    None
}

/// Who may see the dashboard: `Ok(role)` (admin when no tokens are
/// configured), or the response to send instead: a redirect to `/login`
/// for pages (`api == false`), 401 for JSON.
#[allow(clippy::result_large_err)]
pub fn access(
    h: &Http,
    headers: &HeaderMap,
    path_and_query: &str,
    api: bool,
) -> Result<Role, Response> {
    if !h.login_required() {
        return Ok(Role::Admin);
    }
    if let Some(role) = cookie_session(headers).and_then(|id| h.sessions().get(&id)) {
        return Ok(role);
    }
    if api {
        return Err((
            StatusCode::UNAUTHORIZED,
            [(header::CONTENT_TYPE, "application/json")],
            "{\"error\":\"log in at /login\"}",
        )
            .into_response());
    }
    let next = html::url_encode(path_and_query);
    Err((
        StatusCode::SEE_OTHER,
        [(header::LOCATION, format!("/login?next={next}"))],
    )
        .into_response())
}

/// Who holds the session of a request's cookie (None: no live session).
pub fn session_identity(h: &Http, headers: &HeaderMap) -> Option<Identity> {
    cookie_session(headers)
        .and_then(|id| h.sessions().identity(&id))
        .map(|(who, _)| who)
}

/// A `next` target that stays on this site (a path, never `//host`).
pub fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && !n.contains('\\')
                && n.len() <= 512
                && n.bytes().all(|b| (0x21..0x7f).contains(&b)) =>
        {
            n.to_string()
        }
        _ => "/".to_string(),
    }
}

async fn login_page(State(h): State<Http>, headers: HeaderMap, uri: axum::http::Uri) -> Response {
    let q = html::parse_query(uri.query().unwrap_or(""));
    let next = safe_next(q.get("next").map(String::as_str));
    if !h.login_required() {
        return (StatusCode::SEE_OTHER, [(header::LOCATION, next)]).into_response();
    }
    login_form(&h, &headers, &next, None, StatusCode::OK)
}

/// The login page: the token form (when the coordinator has tokens) and
/// "Sign in with PROVIDER" (when OpenID Connect is configured), with
/// `error` above them.
pub fn login_form(
    h: &Http,
    headers: &HeaderMap,
    next: &str,
    error: Option<&str>,
    status: StatusCode,
) -> Response {
    let err = error
        .map(|e| format!("<p class=\"error\" id=\"login-error\">{}</p>", html::esc(e)))
        .unwrap_or_default();
    let sso = h
        .oidc()
        .map(|p| {
            format!(
                "<p class=\"sso\"><a class=\"button\" id=\"oidc-login\" href=\"/login/oidc?next={}\">Sign in with {}</a></p>",
                html::esc(&html::url_encode(next)),
                html::esc(&p.config().display_name)
            )
        })
        .unwrap_or_default();
    let tokens = if h.guard().enabled() {
        format!(
            "{}<form method=\"post\" action=\"/login\">\
             <input type=\"hidden\" name=\"next\" value=\"{}\">\
             <label>Token <input type=\"password\" name=\"token\" id=\"token\" autocomplete=\"current-password\" required{}></label>\
             <button type=\"submit\">Log in</button></form>",
            if sso.is_empty() {
                ""
            } else {
                "<p class=\"or\">or with a token of this coordinator:</p>"
            },
            html::esc(next),
            if sso.is_empty() { " autofocus" } else { "" }
        )
    } else {
        String::new()
    };
    let intro = match (sso.is_empty(), tokens.is_empty()) {
        (true, _) => {
            "The dashboard needs a <b>user</b> token (read-only) or an <b>admin</b> token (actions too) of this coordinator."
        }
        (false, true) => "Sign in with your site account (users read, admins act).",
        (false, false) => {
            "Sign in with your site account, or a <b>user</b> (read-only) or <b>admin</b> token."
        }
    };
    let body = format!(
        "<section class=\"login\"><h1>Log in</h1><p>{intro}</p>{err}{sso}{tokens}</section>"
    );
    let mut chrome = html::Chrome::of(h, headers);
    chrome.logged_in = false;
    chrome.who = None;
    (
        status,
        axum::response::Html(html::page("Log in", "", &chrome, &body)),
    )
        .into_response()
}

async fn login(State(h): State<Http>, peer: PeerInfo, headers: HeaderMap, body: Bytes) -> Response {
    let peer: SocketAddr = peer.0.0;
    if body.len() > 8192 {
        return (StatusCode::PAYLOAD_TOO_LARGE, "form too large").into_response();
    }
    let form = html::parse_query(&String::from_utf8_lossy(&body));
    let next = safe_next(form.get("next").map(String::as_str));
    if !h.guard().enabled() {
        return (StatusCode::SEE_OTHER, [(header::LOCATION, next)]).into_response();
    }
    let token = form.get("token").map(String::as_str).unwrap_or("");
    match h
        .guard()
        .login(peer.ip(), token, &[Role::User], "dashboard")
    {
        Ok(who) => {
            let role = who.role;
            let id = h.sessions().create(who);
            tracing::info!(peer = %peer, role = role.as_str(), "dashboard login");
            let cookie = session_cookie(&id, SESSION_TTL.as_secs(), h.tls());
            (
                StatusCode::SEE_OTHER,
                [
                    (header::SET_COOKIE, cookie),
                    (header::LOCATION, next.to_string()),
                ],
            )
                .into_response()
        }
        Err(s) => {
            let (code, msg) = match s.code() {
                tonic::Code::ResourceExhausted => (
                    StatusCode::TOO_MANY_REQUESTS,
                    "Too many failed logins from this address; try again later.",
                ),
                tonic::Code::PermissionDenied => (
                    StatusCode::FORBIDDEN,
                    "This token's role may not use the dashboard (user or admin tokens only).",
                ),
                _ => (StatusCode::UNAUTHORIZED, "Wrong token."),
            };
            login_form(&h, &headers, &next, Some(msg), code)
        }
    }
}

async fn logout(State(h): State<Http>, headers: HeaderMap) -> Response {
    if let Some(id) = cookie_session(&headers) {
        h.sessions().remove(&id);
    }
    let clear = session_cookie("", 0, h.tls());
    (
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, clear),
            (header::LOCATION, "/login".to_string()),
        ],
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_expire_and_ids_are_random() {
        let s = Sessions::default();
        let who = |role| Identity {
            role,
            name: Some("alice".into()),
            credential: "ab".into(),
        };
        let a = s.create(who(Role::User));
        let b = s.create(who(Role::Admin));
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
        assert_eq!(s.get(&a), Some(Role::User));
        let (ia, ca) = s.identity(&a).unwrap();
        let (_, cb) = s.identity(&b).unwrap();
        assert_eq!(ia.name.as_deref(), Some("alice"));
        assert!(ca.len() == 64 && ca != cb && ca != a && ca != s.anonymous_csrf());
        s.remove(&a);
        assert_eq!(s.get(&a), None);
        assert_eq!(s.get("nope"), None);
    }

    #[test]
    fn cookies_are_http_only_strict_and_secure_over_tls() {
        assert_eq!(
            session_cookie("ab", 60, true),
            "benchlake_session=ab; HttpOnly; SameSite=Strict; Path=/; Max-Age=60; Secure"
        );
        assert!(!session_cookie("ab", 60, false).contains("Secure"));
    }

    #[test]
    fn next_stays_on_site() {
        assert_eq!(
            safe_next(Some("/runs?status=FAILED")),
            "/runs?status=FAILED"
        );
        assert_eq!(safe_next(Some("//evil.example/")), "/");
        assert_eq!(safe_next(Some("https://evil.example/")), "/");
        assert_eq!(safe_next(Some("/\\evil")), "/");
        assert_eq!(safe_next(None), "/");
    }

    #[test]
    fn cookie_parsing_takes_only_well_formed_ids() {
        let mut h = HeaderMap::new();
        let id = "a".repeat(64);
        h.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("x=1; {COOKIE}={id}")).unwrap(),
        );
        assert_eq!(cookie_session(&h), Some(id));
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("benchlake_session=<script>"),
        );
        assert_eq!(cookie_session(&h), None);
    }
}
