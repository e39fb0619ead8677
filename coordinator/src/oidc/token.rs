//! The checks of an OpenID Connect login that need no network: the ID
//! token's signature against the provider's keys (JWKS), its issuer,
//! audience, expiry and nonce ([`validate_id_token`]), and the mapping of
//! its claims to a benchlake role and owner name ([`map_claims`]).
//!
//! Signatures are verified by `jsonwebtoken` with its aws-lc-rs backend
//! (docs/architecture.md, "Dashboard sign-in"); only asymmetric algorithms
//! are accepted ([`ALGORITHMS`]): never `none`, never HMAC with the client
//! secret.
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

use crate::config::Role;

/// The signature algorithms an ID token may use.
pub const ALGORITHMS: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// Clock skew allowed on `exp`, `nbf` and `iat` (seconds).
pub const LEEWAY_S: u64 = 60;

/// Why an ID token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the ID token is malformed: {0}")]
    Malformed(String),
    #[error(
        "the ID token is signed with {0}, which is not accepted (RS*, PS*, ES256, ES384, EdDSA)"
    )]
    Algorithm(String),
    #[error("no key of the provider's JWKS matches the ID token (kid {0})")]
    UnknownKey(String),
    #[error("the ID token's signature does not verify against the provider's key")]
    Signature,
    #[error("the ID token's issuer is not {0}")]
    Issuer(String),
    #[error("the ID token is not issued to this client ({0})")]
    Audience(String),
    #[error("the ID token has expired")]
    Expired,
    #[error("the ID token is not valid yet")]
    NotYetValid,
    #[error("the ID token's nonce does not match this sign-in")]
    Nonce,
    #[error("the ID token lacks the claim {0}")]
    Missing(String),
}

/// What an ID token must say.
#[derive(Debug, Clone)]
pub struct Expect<'a> {
    /// The provider's issuer identifier (exactly as discovered).
    pub issuer: &'a str,
    /// This client's id (the audience, and `azp` when there are several).
    pub client_id: &'a str,
    /// The nonce sent with this sign-in's authorization request.
    pub nonce: &'a str,
}

/// Installs jsonwebtoken's aws-lc-rs provider (once per process; later
/// calls and a provider installed elsewhere are fine).
fn crypto() {
    let _ = jsonwebtoken::crypto::aws_lc::DEFAULT_PROVIDER.install_default();
}

/// Whether `key` may verify a token signed with `alg`: not an encryption
/// key, and its own `alg`, when it names one, is `alg`.
fn key_fits(key: &Jwk, alg: Algorithm) -> bool {
    if matches!(key.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        return false;
    }
    match &key.common.key_algorithm {
        Some(ka) => ka.to_string() == format!("{alg:?}"),
        None => true,
    }
}

/// The claims of ID token `token` once its signature verifies against one of
/// `keys` and its `iss`, `aud` (and `azp`), `exp`, `nbf`, `iat` and `nonce`
/// are what `expect` says. `Err(UnknownKey)` asks the caller to fetch the
/// provider's keys again (they may have rotated) and retry.
pub fn validate_id_token(
    token: &str,
    keys: &[Jwk],
    expect: &Expect<'_>,
) -> Result<Map<String, Value>, TokenError> {
    crypto();
    let header =
        jsonwebtoken::decode_header(token).map_err(|e| TokenError::Malformed(e.to_string()))?;
    if !ALGORITHMS.contains(&header.alg) {
        return Err(TokenError::Algorithm(format!("{:?}", header.alg)));
    }
    let candidates: Vec<&Jwk> = keys
        .iter()
        .filter(|k| match &header.kid {
            Some(kid) => k.common.key_id.as_deref() == Some(kid.as_str()),
            None => true,
        })
        .filter(|k| key_fits(k, header.alg))
        .collect();
    if candidates.is_empty() {
        return Err(TokenError::UnknownKey(
            header.kid.clone().unwrap_or_else(|| "none".into()),
        ));
    }
    let mut v = Validation::new(header.alg);
    v.set_issuer(&[expect.issuer]);
    v.set_audience(&[expect.client_id]);
    v.set_required_spec_claims(&["iss", "aud", "exp", "sub"]);
    v.leeway = LEEWAY_S;
    v.validate_exp = true;
    v.validate_nbf = true;
    let mut last = TokenError::Signature;
    for key in candidates {
        let Ok(dk) = DecodingKey::from_jwk(key) else {
            continue;
        };
        match jsonwebtoken::decode::<Map<String, Value>>(token, &dk, &v) {
            Ok(data) => return check_claims(data.claims, expect),
            Err(e) => {
                last = match e.kind() {
                    ErrorKind::InvalidSignature => TokenError::Signature,
                    ErrorKind::InvalidIssuer => TokenError::Issuer(expect.issuer.to_string()),
                    ErrorKind::InvalidAudience => {
                        TokenError::Audience(expect.client_id.to_string())
                    }
                    ErrorKind::ExpiredSignature => TokenError::Expired,
                    ErrorKind::ImmatureSignature => TokenError::NotYetValid,
                    ErrorKind::MissingRequiredClaim(c) => TokenError::Missing(c.clone()),
                    ErrorKind::InvalidAlgorithm => {
                        TokenError::Algorithm(format!("{:?}", header.alg))
                    }
                    _ => TokenError::Malformed(e.to_string()),
                };
                // Only a signature failure may be another key's token.
                if last != TokenError::Signature {
                    return Err(last);
                }
            }
        }
    }
    Err(last)
}

/// The checks jsonwebtoken does not make: `iat` present and not in the
/// future, `azp` when the audience has several members, the nonce.
fn check_claims(
    claims: Map<String, Value>,
    expect: &Expect<'_>,
) -> Result<Map<String, Value>, TokenError> {
    let now = chrono::Utc::now().timestamp();
    match claims.get("iat").and_then(Value::as_f64) {
        None => return Err(TokenError::Missing("iat".into())),
        Some(iat) if iat > (now + LEEWAY_S as i64) as f64 => return Err(TokenError::NotYetValid),
        Some(_) => {}
    }
    if let Some(Value::Array(aud)) = claims.get("aud")
        && aud.len() > 1
        && claims.get("azp").and_then(Value::as_str) != Some(expect.client_id)
    {
        return Err(TokenError::Audience(format!(
            "{} among several audiences without azp naming it",
            expect.client_id
        )));
    }
    match claims.get("nonce").and_then(Value::as_str) {
        Some(n) if ct_eq(n.as_bytes(), expect.nonce.as_bytes()) => Ok(claims),
        Some(_) => Err(TokenError::Nonce),
        None => Err(TokenError::Missing("nonce".into())),
    }
}

fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// How claims become a benchlake identity (part of
/// [`super::OidcConfig`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimMapping {
    /// The claim whose values name groups or roles (`groups`;
    /// `realm_access.roles` walks into an object).
    pub roles_claim: String,
    /// Claim value → role; `*` matches everyone the provider signs in.
    pub role_map: Vec<(String, Role)>,
    /// The claim used as the user's name: the owner of what they create
    /// (`preferred_username`).
    pub name_claim: String,
}

/// A signed-in user: name and role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapped {
    pub name: String,
    pub role: Role,
}

/// Why claims give no benchlake identity; the message is shown to the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    #[error("the provider sent no '{0}' claim to name you by")]
    NoName(String),
    #[error(
        "the name claim '{claim}' holds '{value}', which is not a valid benchlake owner name (letters, digits, . _ - @ +, at most 128)"
    )]
    BadName { claim: String, value: String },
    #[error("{name} has no benchlake role: the claim '{claim}' holds {}, and none of these is given a role here", shown(.values))]
    NoRole {
        name: String,
        claim: String,
        values: Vec<String>,
    },
}

fn shown(values: &[String]) -> String {
    if values.is_empty() {
        "nothing".into()
    } else {
        values
            .iter()
            .map(|v| format!("'{v}'"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The value of claim `path`: the claim of that exact name, else a walk
/// through objects along its dots (`realm_access.roles`).
pub fn claim<'a>(claims: &'a Map<String, Value>, path: &str) -> Option<&'a Value> {
    if let Some(v) = claims.get(path) {
        return Some(v);
    }
    let mut parts = path.split('.');
    let mut v = claims.get(parts.next()?)?;
    for p in parts {
        v = v.as_object()?.get(p)?;
    }
    Some(v)
}

/// The string values of a roles claim: an array's strings, or one string.
fn values_of(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .map(String::from)
            .take(1000)
            .collect(),
        _ => Vec::new(),
    }
}

/// Whether `name` may be an owner name.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-@+".contains(&b))
}

/// The name and role `claims` give under `m`: the most privileged role any
/// of the roles claim's values (or `*`) maps to.
pub fn map_claims(m: &ClaimMapping, claims: &Map<String, Value>) -> Result<Mapped, MapError> {
    let name = match claim(claims, &m.name_claim) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => return Err(MapError::NoName(m.name_claim.clone())),
    };
    if !valid_name(&name) {
        return Err(MapError::BadName {
            claim: m.name_claim.clone(),
            value: name.chars().take(160).collect(),
        });
    }
    let values = values_of(claim(claims, &m.roles_claim));
    let mut role = None;
    for (value, r) in &m.role_map {
        if value == "*" || values.iter().any(|v| v == value) {
            role = match (role, *r) {
                (Some(Role::Admin), _) | (_, Role::Admin) => Some(Role::Admin),
                _ => Some(*r),
            };
        }
    }
    match role {
        Some(role) => Ok(Mapped { name, role }),
        None => Err(MapError::NoRole {
            name,
            claim: m.roles_claim.clone(),
            values,
        }),
    }
}

#[cfg(test)]
mod tests;
