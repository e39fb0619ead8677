//! OpenID Connect sign-in for the dashboard (docs/dashboard.md, "Signing
//! in with OpenID Connect"): the authorization-code flow with PKCE (S256),
//! `state` and `nonce`, against one provider (Keycloak, or any certified
//! OpenID provider) found by discovery
//! (`ISSUER/.well-known/openid-configuration`).
//!
//! - [`Provider::start`] makes a pending sign-in: random `state`, `nonce`,
//!   PKCE verifier and a browser binding (a cookie value; the callback must
//!   come from the browser that started it), kept here for
//!   [`PENDING_TTL`]; it returns the provider's authorization URL.
//! - [`Provider::finish`] takes the callback's `code`, `state` (used once)
//!   and binding, exchanges the code at the token endpoint with the client
//!   secret and the verifier, validates the ID token against the
//!   provider's JWKS ([`token::validate_id_token`]; the keys are fetched
//!   again once when a token names a key not yet known), adds the UserInfo
//!   claims when the ID token lacks the name or roles claim (the `sub` must
//!   match), and maps the claims to a name and role
//!   ([`token::map_claims`]).
//!
//! The dashboard then makes the same session as a token login
//! ([`crate::dashboard::Sessions`]); tokens stay the API's credential.
//! Nothing here logs a code, a token or the client secret.
pub mod token;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine;
use jsonwebtoken::jwk::Jwk;
use rand::RngCore;
use serde_json::Value;
use sha2::Digest;

use crate::config::{Identity, Role};
pub use token::{ClaimMapping, MapError, Mapped, TokenError};

/// How long a started sign-in may take to come back.
pub const PENDING_TTL: Duration = Duration::from_secs(600);
/// Sign-ins pending at most (the oldest are dropped beyond).
const MAX_PENDING: usize = 10_000;
/// How long discovery and the keys are kept before they are fetched again.
const META_TTL: Duration = Duration::from_secs(3600);
/// The least time between two fetches of the keys for an unknown `kid`.
const JWKS_MIN_REFETCH: Duration = Duration::from_secs(30);
/// The largest provider response read.
const MAX_BODY: usize = 1 << 20;
/// The callback's path on the dashboard.
pub const CALLBACK_PATH: &str = "/login/oidc/callback";

/// The client secret (never printed).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// The dashboard's OpenID Connect client (flags `--oidc-*`,
/// docs/configuration.md).
#[derive(Debug, Clone)]
pub struct OidcConfig {
    /// The provider's issuer identifier, e.g.
    /// `https://sso.example.org/realms/hpc`.
    pub issuer: String,
    /// This client's id at the provider.
    pub client_id: String,
    /// This client's secret.
    pub client_secret: Secret,
    /// Where the provider sends the browser back: the dashboard's
    /// [`CALLBACK_PATH`], as the browser reaches it.
    pub redirect_url: String,
    /// Scopes asked for (`openid` always among them).
    pub scopes: Vec<String>,
    /// Claims → name and role.
    pub mapping: ClaimMapping,
    /// The provider's name on the login page ("Sign in with NAME").
    pub display_name: String,
    /// Extra CA certificates (PEM) the provider's TLS certificate may chain to.
    pub ca_pem: Option<Vec<u8>>,
    /// Timeout of one request to the provider.
    pub timeout: Duration,
}

/// Whether `url` may carry tokens: https, or http to this host.
fn secure_or_loopback(url: &reqwest::Url) -> bool {
    match url.scheme() {
        "https" => true,
        "http" => match url.host() {
            Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
            Some(url::Host::Ipv4(a)) => a.is_loopback(),
            Some(url::Host::Ipv6(a)) => a.is_loopback(),
            None => false,
        },
        _ => false,
    }
}

impl OidcConfig {
    /// Checks the settings; the error names the flag.
    pub fn check(&self) -> Result<(), String> {
        let issuer = reqwest::Url::parse(&self.issuer)
            .map_err(|e| format!("oidc-issuer: '{}' is not a URL: {e}", self.issuer))?;
        if !secure_or_loopback(&issuer) {
            return Err(format!(
                "oidc-issuer: '{}' must be https:// (http:// only on this host's loopback)",
                self.issuer
            ));
        }
        if issuer.query().is_some() || issuer.fragment().is_some() {
            return Err(format!(
                "oidc-issuer: '{}' may have no query or fragment",
                self.issuer
            ));
        }
        if self.client_id.trim().is_empty() {
            return Err("oidc-client-id: needed with --oidc-issuer".into());
        }
        if self.client_secret.0.is_empty() {
            return Err(
                "oidc-client-secret-file (or BENCHLAKE_OIDC_CLIENT_SECRET): needed with --oidc-issuer"
                    .into(),
            );
        }
        let r = reqwest::Url::parse(&self.redirect_url).map_err(|e| {
            format!(
                "oidc-redirect-url: '{}' is not a URL: {e}",
                self.redirect_url
            )
        })?;
        if !matches!(r.scheme(), "http" | "https") || r.path() != CALLBACK_PATH {
            return Err(format!(
                "oidc-redirect-url: '{}' must be http(s)://HOST[:PORT]{CALLBACK_PATH}, the dashboard's callback",
                self.redirect_url
            ));
        }
        if !self.scopes.iter().any(|s| s == "openid") {
            return Err("oidc-scopes: must include openid".into());
        }
        if let Some(s) = self
            .scopes
            .iter()
            .find(|s| s.is_empty() || !s.bytes().all(|b| b.is_ascii_graphic() && b != b'"'))
        {
            return Err(format!("oidc-scopes: '{s}' is not a scope name"));
        }
        if self.mapping.role_map.is_empty() {
            return Err(
                "oidc-role-map: give at least one VALUE=ROLE (e.g. bench-admins=admin,staff=user)"
                    .into(),
            );
        }
        if self.mapping.roles_claim.is_empty() || self.mapping.name_claim.is_empty() {
            return Err("oidc-roles-claim and oidc-name-claim may not be empty".into());
        }
        Ok(())
    }
}

/// Parses `VALUE=ROLE` entries (`admin` or `user`) of `--oidc-role-map`.
pub fn parse_role_map(entries: &[String]) -> Result<Vec<(String, Role)>, String> {
    let mut out = Vec::new();
    for e in entries {
        let (v, r) = e
            .rsplit_once('=')
            .ok_or_else(|| format!("oidc-role-map: '{e}' is not VALUE=ROLE"))?;
        let v = v.trim();
        if v.is_empty() {
            return Err(format!("oidc-role-map: '{e}' has an empty VALUE"));
        }
        let role = match r.trim() {
            "admin" => Role::Admin,
            "user" => Role::User,
            other => {
                return Err(format!(
                    "oidc-role-map: '{e}': the role '{other}' is not admin or user (agent and worker roles are token-only)"
                ));
            }
        };
        out.push((v.to_string(), role));
    }
    Ok(out)
}

/// Why a sign-in failed; [`OidcError::user_message`] is what the page
/// says, the Display what the log says.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    /// The provider could not be reached or answered nonsense.
    #[error("identity provider: {0}")]
    Provider(String),
    /// The provider reported an error on the callback.
    #[error("the identity provider refused the sign-in: {0}")]
    Refused(String),
    /// The callback does not belong to a pending sign-in of this browser.
    #[error("sign-in callback refused: {0}")]
    Callback(String),
    /// The ID token failed a check.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// The claims give no identity.
    #[error(transparent)]
    Map(#[from] MapError),
}

impl OidcError {
    /// The text shown on the page.
    pub fn user_message(&self) -> String {
        match self {
            OidcError::Provider(_) => {
                "The identity provider could not be reached or gave an unusable answer; \
                 try again later (the coordinator's log has the details)."
                    .into()
            }
            OidcError::Token(_) => {
                "The identity provider's answer failed benchlake's checks; sign in again \
                 (the coordinator's log has the details)."
                    .into()
            }
            other => other.to_string(),
        }
    }

    /// Whether the user is known but refused (403) rather than the sign-in
    /// having failed (400/502).
    pub fn is_refusal(&self) -> bool {
        matches!(self, OidcError::Map(_) | OidcError::Refused(_))
    }
}

/// A sign-in started by [`Provider::start`].
struct Pending {
    nonce: String,
    verifier: String,
    binding: String,
    next: String,
    expires: Instant,
}

/// What discovery said, and the keys.
#[derive(Clone)]
struct Meta {
    authorization_endpoint: reqwest::Url,
    token_endpoint: reqwest::Url,
    userinfo_endpoint: Option<reqwest::Url>,
    jwks_uri: reqwest::Url,
    /// `client_secret_post` when the provider does not take
    /// `client_secret_basic`.
    secret_in_body: bool,
    keys: Vec<Jwk>,
    fetched: Instant,
    keys_fetched: Instant,
}

/// A started sign-in: where to send the browser, and the binding cookie.
#[derive(Debug)]
pub struct Started {
    pub authorize_url: String,
    pub binding: String,
}

/// A finished sign-in.
#[derive(Debug)]
pub struct SignedIn {
    pub identity: Identity,
    pub next: String,
}

/// The callback's query.
#[derive(Debug, Default)]
pub struct Callback {
    pub code: Option<String>,
    pub state: Option<String>,
    pub iss: Option<String>,
    pub error: Option<String>,
    pub error_description: Option<String>,
}

/// One provider: its configuration, HTTP client, discovered metadata and
/// the pending sign-ins.
pub struct Provider {
    cfg: OidcConfig,
    http: reqwest::Client,
    meta: tokio::sync::Mutex<Option<Meta>>,
    pending: Mutex<HashMap<String, Pending>>,
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "oidc::Provider({})", self.cfg.issuer)
    }
}

fn random(n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    rand::rng().fill_bytes(&mut b);
    b
}

fn b64url(b: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

/// The PKCE S256 challenge of `verifier`.
pub fn pkce_challenge(verifier: &str) -> String {
    b64url(&sha2::Sha256::digest(verifier.as_bytes()))
}

/// `application/x-www-form-urlencoded` of `pairs`.
fn form(pairs: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

/// `s` percent-encoded as in a form (RFC 6749 2.3.1 for Basic credentials).
fn form_encode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

impl Provider {
    /// The provider of `cfg` (checked by [`OidcConfig::check`]); no request
    /// is made before the first sign-in.
    pub fn new(cfg: OidcConfig) -> Result<Self, String> {
        cfg.check()?;
        let mut b = reqwest::Client::builder()
            .timeout(cfg.timeout)
            .connect_timeout(cfg.timeout.min(Duration::from_secs(5)))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .user_agent(concat!("benchlake/", env!("CARGO_PKG_VERSION")));
        if let Some(pem) = &cfg.ca_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| format!("oidc-ca: not PEM certificates: {e}"))?;
            if certs.is_empty() {
                return Err("oidc-ca: no certificate in it".into());
            }
            b = b.tls_certs_merge(certs);
        }
        let http = b
            .build()
            .map_err(|e| format!("OpenID Connect HTTP client: {e}"))?;
        Ok(Self {
            cfg,
            http,
            meta: tokio::sync::Mutex::new(None),
            pending: Mutex::new(HashMap::new()),
        })
    }

    /// The settings.
    pub fn config(&self) -> &OidcConfig {
        &self.cfg
    }

    /// GET `url` (JSON), with `bearer` when given.
    async fn get_json(&self, url: &reqwest::Url, bearer: Option<&str>) -> Result<Value, OidcError> {
        let mut req = self
            .http
            .get(url.clone())
            .header("accept", "application/json");
        if let Some(t) = bearer {
            req = req.bearer_auth(t);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| OidcError::Provider(format!("GET {url}: {e}")))?;
        self.json_of(resp, &format!("GET {url}")).await
    }

    /// The JSON body of `resp` (at most [`MAX_BODY`]); a non-2xx status is
    /// an error quoting the provider's `error` fields.
    async fn json_of(&self, mut resp: reqwest::Response, what: &str) -> Result<Value, OidcError> {
        let status = resp.status();
        let mut body = Vec::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| OidcError::Provider(format!("{what}: {e}")))?
        {
            if body.len() + chunk.len() > MAX_BODY {
                return Err(OidcError::Provider(format!(
                    "{what}: the answer is larger than {MAX_BODY} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        let json: Option<Value> = serde_json::from_slice(&body).ok();
        if !status.is_success() {
            let detail = json
                .as_ref()
                .map(|j| {
                    let s = |k: &str| j.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                    format!("{} {}", s("error"), s("error_description"))
                        .trim()
                        .to_string()
                })
                .unwrap_or_default();
            return Err(OidcError::Provider(format!(
                "{what}: HTTP {status} {}",
                detail.chars().take(300).collect::<String>()
            )));
        }
        json.ok_or_else(|| OidcError::Provider(format!("{what}: the answer is not JSON")))
    }

    /// The keys of the JWKS at `uri`: every key that parses and is not for
    /// encryption (one odd key does not hide the others).
    async fn fetch_keys(&self, uri: &reqwest::Url) -> Result<Vec<Jwk>, OidcError> {
        let set = self.get_json(uri, None).await?;
        let keys: Vec<Jwk> = set
            .get("keys")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|k| serde_json::from_value::<Jwk>(k.clone()).ok())
                    .collect()
            })
            .unwrap_or_default();
        if keys.is_empty() {
            return Err(OidcError::Provider(format!(
                "the JWKS at {uri} holds no usable key"
            )));
        }
        Ok(keys)
    }

    /// Discovery and the keys, fetched when missing or older than
    /// [`META_TTL`].
    async fn meta(&self) -> Result<Meta, OidcError> {
        let mut g = self.meta.lock().await;
        if let Some(m) = g.as_ref()
            && m.fetched.elapsed() < META_TTL
        {
            return Ok(m.clone());
        }
        let base = self.cfg.issuer.trim_end_matches('/');
        let url = reqwest::Url::parse(&format!("{base}/.well-known/openid-configuration"))
            .map_err(|e| OidcError::Provider(format!("discovery URL: {e}")))?;
        let d = self.get_json(&url, None).await?;
        let issuer = d.get("issuer").and_then(Value::as_str).unwrap_or("");
        if issuer != self.cfg.issuer {
            return Err(OidcError::Provider(format!(
                "discovery at {url} names the issuer '{issuer}', not '{}' (give --oidc-issuer exactly as the provider names itself)",
                self.cfg.issuer
            )));
        }
        let endpoint = |k: &str, required: bool| -> Result<Option<reqwest::Url>, OidcError> {
            match d.get(k).and_then(Value::as_str) {
                Some(s) => {
                    let u = reqwest::Url::parse(s).map_err(|e| {
                        OidcError::Provider(format!("discovery: {k} '{s}' is not a URL: {e}"))
                    })?;
                    // The browser goes to the authorization endpoint;
                    // codes, tokens and keys travel to the others.
                    let ok = if k == "authorization_endpoint" {
                        matches!(u.scheme(), "https" | "http")
                    } else {
                        secure_or_loopback(&u)
                    };
                    if !ok {
                        return Err(OidcError::Provider(format!(
                            "discovery: {k} '{s}' is not https"
                        )));
                    }
                    Ok(Some(u))
                }
                None if required => Err(OidcError::Provider(format!(
                    "discovery at {url} has no {k}"
                ))),
                None => Ok(None),
            }
        };
        let authorization_endpoint = endpoint("authorization_endpoint", true)?;
        let token_endpoint = endpoint("token_endpoint", true)?;
        let jwks_uri = endpoint("jwks_uri", true)?;
        let userinfo_endpoint = endpoint("userinfo_endpoint", false)?;
        let (Some(authorization_endpoint), Some(token_endpoint), Some(jwks_uri)) =
            (authorization_endpoint, token_endpoint, jwks_uri)
        else {
            return Err(OidcError::Provider("discovery: endpoints missing".into()));
        };
        let methods: Vec<&str> = d
            .get("token_endpoint_auth_methods_supported")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let secret_in_body = !methods.is_empty()
            && !methods.contains(&"client_secret_basic")
            && methods.contains(&"client_secret_post");
        let keys = self.fetch_keys(&jwks_uri).await?;
        let now = Instant::now();
        let m = Meta {
            authorization_endpoint,
            token_endpoint,
            userinfo_endpoint,
            jwks_uri,
            secret_in_body,
            keys,
            fetched: now,
            keys_fetched: now,
        };
        tracing::info!(issuer = %self.cfg.issuer, keys = m.keys.len(), "OpenID provider discovered");
        *g = Some(m.clone());
        Ok(m)
    }

    /// The keys fetched again (a token named a key not yet known), at most
    /// once per [`JWKS_MIN_REFETCH`].
    async fn refresh_keys(&self) -> Result<Vec<Jwk>, OidcError> {
        let mut g = self.meta.lock().await;
        let Some(m) = g.as_mut() else {
            return Err(OidcError::Provider("not discovered".into()));
        };
        if m.keys_fetched.elapsed() >= JWKS_MIN_REFETCH {
            m.keys = self.fetch_keys(&m.jwks_uri.clone()).await?;
            m.keys_fetched = Instant::now();
            tracing::info!(issuer = %self.cfg.issuer, keys = m.keys.len(), "OpenID provider keys fetched again");
        }
        Ok(m.keys.clone())
    }

    /// Starts a sign-in that returns to `next` (a path on the dashboard,
    /// already checked).
    pub async fn start(&self, next: &str) -> Result<Started, OidcError> {
        let meta = self.meta().await?;
        let state = hex::encode(random(32));
        let nonce = hex::encode(random(32));
        let verifier = b64url(&random(32));
        let binding = hex::encode(random(32));
        let mut url = meta.authorization_endpoint.clone();
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &self.cfg.client_id)
            .append_pair("redirect_uri", &self.cfg.redirect_url)
            .append_pair("scope", &self.cfg.scopes.join(" "))
            .append_pair("state", &state)
            .append_pair("nonce", &nonce)
            .append_pair("code_challenge", &pkce_challenge(&verifier))
            .append_pair("code_challenge_method", "S256");
        let now = Instant::now();
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if p.len() >= MAX_PENDING {
            p.retain(|_, v| v.expires > now);
        }
        if p.len() >= MAX_PENDING
            && let Some(k) = p
                .iter()
                .min_by_key(|(_, v)| v.expires)
                .map(|(k, _)| k.clone())
        {
            p.remove(&k);
        }
        p.insert(
            state,
            Pending {
                nonce,
                verifier,
                binding: binding.clone(),
                next: next.to_string(),
                expires: now + PENDING_TTL,
            },
        );
        Ok(Started {
            authorize_url: url.to_string(),
            binding,
        })
    }

    /// Finishes the sign-in the callback `cb` belongs to; `binding` is the
    /// browser's binding cookie.
    pub async fn finish(
        &self,
        cb: &Callback,
        binding: Option<&str>,
    ) -> Result<SignedIn, OidcError> {
        let pending = {
            let Some(state) = cb.state.as_deref() else {
                return Err(OidcError::Callback("the callback has no state".into()));
            };
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            // Used once, whatever follows.
            p.remove(state)
        };
        let Some(pending) = pending.filter(|p| p.expires > Instant::now()) else {
            return Err(OidcError::Callback(
                "this sign-in is unknown, expired or was used already; sign in again".into(),
            ));
        };
        if !binding.is_some_and(|b| token_eq(b, &pending.binding)) {
            return Err(OidcError::Callback(
                "this sign-in was started in another browser (or its cookie was lost); sign in again"
                    .into(),
            ));
        }
        if let Some(e) = &cb.error {
            let d = cb.error_description.as_deref().unwrap_or("");
            return Err(OidcError::Refused(
                format!("{e} {d}").trim().chars().take(300).collect(),
            ));
        }
        if let Some(iss) = &cb.iss
            && iss != &self.cfg.issuer
        {
            return Err(OidcError::Callback(format!(
                "the callback names the issuer '{}', not this dashboard's provider",
                iss.chars().take(200).collect::<String>()
            )));
        }
        let Some(code) = cb.code.as_deref().filter(|c| !c.is_empty()) else {
            return Err(OidcError::Callback("the callback has no code".into()));
        };
        let meta = self.meta().await?;
        let tokens = self.exchange(&meta, code, &pending.verifier).await?;
        let id_token = tokens
            .get("id_token")
            .and_then(Value::as_str)
            .ok_or_else(|| OidcError::Provider("the token answer has no id_token".into()))?;
        let expect = token::Expect {
            issuer: &self.cfg.issuer,
            client_id: &self.cfg.client_id,
            nonce: &pending.nonce,
        };
        let mut claims = match token::validate_id_token(id_token, &meta.keys, &expect) {
            Err(TokenError::UnknownKey(_)) => {
                let keys = self.refresh_keys().await?;
                token::validate_id_token(id_token, &keys, &expect)?
            }
            r => r?,
        };
        let m = &self.cfg.mapping;
        if (token::claim(&claims, &m.name_claim).is_none()
            || token::claim(&claims, &m.roles_claim).is_none())
            && let (Some(ui), Some(at)) = (
                &meta.userinfo_endpoint,
                tokens.get("access_token").and_then(Value::as_str),
            )
        {
            let info = self.get_json(ui, Some(at)).await?;
            let Some(info) = info.as_object() else {
                return Err(OidcError::Provider("UserInfo is not a JSON object".into()));
            };
            if info.get("sub") != claims.get("sub") {
                return Err(OidcError::Provider(
                    "UserInfo names another subject than the ID token".into(),
                ));
            }
            for (k, v) in info {
                claims.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        let mapped = token::map_claims(m, &claims)?;
        let sub = claims.get("sub").and_then(Value::as_str).unwrap_or("");
        Ok(SignedIn {
            identity: identity_of(&self.cfg.issuer, sub, mapped),
            next: pending.next,
        })
    }

    /// The token request for `code`.
    async fn exchange(&self, meta: &Meta, code: &str, verifier: &str) -> Result<Value, OidcError> {
        let mut pairs = vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", self.cfg.redirect_url.as_str()),
            ("code_verifier", verifier),
        ];
        let mut req = self
            .http
            .post(meta.token_endpoint.clone())
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json");
        if meta.secret_in_body {
            pairs.push(("client_id", &self.cfg.client_id));
            pairs.push(("client_secret", &self.cfg.client_secret.0));
        } else {
            req = req.basic_auth(
                form_encode(&self.cfg.client_id),
                Some(form_encode(&self.cfg.client_secret.0)),
            );
        }
        let resp = req
            .body(form(&pairs))
            .send()
            .await
            .map_err(|e| OidcError::Provider(format!("token request: {e}")))?;
        self.json_of(resp, "token request").await
    }
}

fn token_eq(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The session identity of a signed-in user: the mapped role, the name as
/// owner ([`Identity::principal`], as a token bound to that name), and a
/// fingerprint of issuer and subject as the credential.
pub fn identity_of(issuer: &str, sub: &str, m: Mapped) -> Identity {
    Identity {
        role: m.role,
        name: Some(m.name),
        credential: crate::config::fingerprint(&format!("oidc {issuer} {sub}")),
    }
}
