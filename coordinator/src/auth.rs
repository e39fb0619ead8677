//! Bearer-token authentication: a tonic interceptor per service that maps the
//! `authorization: Bearer <token>` header to an [`Identity`] (role, bound
//! agent or worker name, credential fingerprint), refuses roles the service
//! does not serve, and leaves the identity in the request extensions for finer
//! checks (draining agents is admin-only; an agent acts only as itself).
//!
//! With mutual TLS, an agent's or worker's client certificate names it (its
//! first DNS subject alternative name, else its common name): the caller may
//! then act only under that name, and a token bound to another name is refused.
//!
//! Failed authentications are counted per peer address: each peer has a
//! budget of [`FAIL_BURST`] failures refilled at [`FAIL_REFILL_PER_S`] per
//! second; a peer that exhausts it is refused outright (`RESOURCE_EXHAUSTED`,
//! whatever token it sends, so guessing learns nothing) until the budget has
//! refilled. Failures are logged with the peer and the service, never the token;
//! while a peer is blocked only the block and its end are logged.
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tonic::{Request, Status};

use crate::config::{Identity, MetricsTokens, Role, Tokens};

/// Failed authentications a peer may make at once.
pub const FAIL_BURST: f64 = 30.0;
/// Failures a peer regains per second.
pub const FAIL_REFILL_PER_S: f64 = 2.0;
/// Peers tracked at most (the oldest entries are forgotten beyond).
const MAX_PEERS: usize = 100_000;

/// The identity of the caller, as set by the interceptor.
pub fn identity_of<T>(req: &Request<T>) -> Identity {
    req.extensions()
        .get::<Identity>()
        .cloned()
        .unwrap_or_else(Identity::anonymous_admin)
}

/// The role of the caller, as set by the interceptor.
pub fn role_of<T>(req: &Request<T>) -> Role {
    identity_of(req).role
}

/// "a user or admin token": the roles that may call what `allowed` guards
/// (admin always may), for a PermissionDenied message that says what to use.
fn roles_needed(allowed: &[Role]) -> String {
    let mut names: Vec<&str> = allowed
        .iter()
        .filter(|r| **r != Role::Admin)
        .map(|r| r.as_str())
        .collect();
    names.push("admin");
    let list = names.join(" or ");
    let article = if list.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {list} token")
}

/// Requires one of `allowed` roles (admin always passes).
pub fn require<T>(req: &Request<T>, allowed: &[Role]) -> Result<(), Status> {
    let r = role_of(req);
    if r == Role::Admin || allowed.contains(&r) {
        Ok(())
    } else {
        Err(Status::permission_denied(format!(
            "the {} role may not call this method: it needs {}",
            r.as_str(),
            roles_needed(allowed)
        )))
    }
}

#[derive(Debug, Clone, Copy)]
struct Budget {
    left: f64,
    at: Instant,
    blocked: bool,
    refused: u64,
}

/// The per-peer budget of failed authentications, shared by every service.
#[derive(Debug, Default)]
pub struct FailLimiter {
    peers: Mutex<HashMap<IpAddr, Budget>>,
}

impl FailLimiter {
    fn refill(b: &mut Budget, now: Instant) {
        let dt = now.duration_since(b.at).as_secs_f64();
        b.left = (b.left + dt * FAIL_REFILL_PER_S).min(FAIL_BURST);
        b.at = now;
    }

    /// Whether `peer` is blocked now (and counts the refusal).
    fn blocked(&self, peer: IpAddr) -> bool {
        let mut m = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let Some(b) = m.get_mut(&peer) else {
            return false;
        };
        Self::refill(b, Instant::now());
        if b.blocked && b.left >= FAIL_BURST / 2.0 {
            tracing::warn!(peer = %peer, refused = b.refused, "peer unblocked after failed authentications");
            b.blocked = false;
            b.refused = 0;
        }
        if b.blocked {
            b.refused += 1;
        }
        b.blocked
    }

    /// Records one failed authentication of `peer`.
    fn failed(&self, peer: IpAddr, service: &str, reason: &str) {
        let mut m = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() >= MAX_PEERS && !m.contains_key(&peer) {
            m.retain(|_, b| b.blocked);
        }
        let now = Instant::now();
        let b = m.entry(peer).or_insert(Budget {
            left: FAIL_BURST,
            at: now,
            blocked: false,
            refused: 0,
        });
        Self::refill(b, now);
        b.left -= 1.0;
        tracing::warn!(peer = %peer, service, reason, "authentication failed");
        if b.left < 1.0 && !b.blocked {
            b.blocked = true;
            tracing::warn!(
                peer = %peer,
                burst = FAIL_BURST,
                "peer blocked: too many failed authentications"
            );
        }
    }
}

/// What every interceptor shares: the tokens and the failure budget.
#[derive(Debug, Clone)]
pub struct Guard {
    tokens: Tokens,
    limiter: Arc<FailLimiter>,
}

impl Guard {
    /// A guard over `tokens` with a fresh failure budget.
    pub fn new(tokens: Tokens) -> Self {
        Self {
            tokens,
            limiter: Arc::new(FailLimiter::default()),
        }
    }

    /// Authenticates `req` for a service admitting `allowed` (and admin).
    pub fn check<T>(
        &self,
        req: &mut Request<T>,
        allowed: &[Role],
        service: &str,
    ) -> Result<(), Status> {
        if !self.tokens.enabled() {
            req.extensions_mut().insert(Identity::anonymous_admin());
            return Ok(());
        }
        let peer = req
            .remote_addr()
            .map(|a| a.ip())
            .unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let header = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let Some(id) = self.authenticate(peer, header, allowed, service, None)? else {
            return Err(Status::internal("no identity"));
        };
        let mut id = id;
        if matches!(id.role, Role::Agent | Role::Worker)
            && let Some(name) = req
                .peer_certs()
                .and_then(|c| c.first().and_then(|c| cert_name(c.as_ref())))
        {
            match &id.name {
                Some(bound) if *bound != name => {
                    return Err(Status::permission_denied(format!(
                        "this token is bound to '{bound}' but the client certificate names '{name}'"
                    )));
                }
                _ => id.name = Some(name),
            }
        }
        req.extensions_mut().insert(id.role);
        req.extensions_mut().insert(id);
        Ok(())
    }
}

impl Guard {
    /// Authenticates an `authorization` header value from `peer` outside
    /// gRPC (the coordinator's HTTP `/metrics`): a token of `allowed` roles
    /// (or admin), or one of `extra`. Authentication applies when tokens are
    /// configured or `extra` is not empty; failures spend the peer's budget.
    pub fn check_header(
        &self,
        peer: IpAddr,
        header: &str,
        allowed: &[Role],
        extra: &MetricsTokens,
        service: &str,
    ) -> Result<(), Status> {
        if !self.tokens.enabled() && extra.0.is_empty() {
            return Ok(());
        }
        self.authenticate(peer, header, allowed, service, Some(extra))
            .map(|_| ())
    }

    /// Authenticates a token typed into the dashboard's login form: the role
    /// of a token of `allowed` roles (or admin). Failures spend `peer`'s
    /// budget as on gRPC; a blocked peer is refused whatever it sends.
    pub fn login(
        &self,
        peer: IpAddr,
        token: &str,
        allowed: &[Role],
        service: &str,
    ) -> Result<Identity, Status> {
        let header = format!("Bearer {}", token.trim());
        match self.authenticate(peer, &header, allowed, service, None)? {
            Some(id) => Ok(id),
            None => Err(Status::unauthenticated("unknown token")),
        }
    }

    /// Whether tokens are configured (else every caller is admin).
    pub fn enabled(&self) -> bool {
        self.tokens.enabled()
    }

    /// The identity of a bearer `header` (None: one of `extra`), or the
    /// refusal; counts failures against `peer`.
    fn authenticate(
        &self,
        peer: IpAddr,
        header: &str,
        allowed: &[Role],
        service: &str,
        extra: Option<&MetricsTokens>,
    ) -> Result<Option<Identity>, Status> {
        if self.limiter.blocked(peer) {
            return Err(Status::resource_exhausted(
                "too many failed authentications from this address; try again later",
            ));
        }
        let token = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
            .unwrap_or("")
            .trim();
        if token.is_empty() {
            self.limiter.failed(peer, service, "no bearer token");
            return Err(Status::unauthenticated(
                "missing 'authorization: Bearer <token>' metadata",
            ));
        }
        if extra.is_some_and(|e| e.contains(token)) {
            return Ok(None);
        }
        let Some(id) = self.tokens.identify(token) else {
            self.limiter.failed(peer, service, "unknown token");
            return Err(Status::unauthenticated("unknown token"));
        };
        if id.role != Role::Admin && !allowed.contains(&id.role) {
            return Err(Status::permission_denied(format!(
                "the {} role may not call {service}: it needs {}",
                id.role.as_str(),
                roles_needed(allowed)
            )));
        }
        Ok(Some(id))
    }
}

/// The agent or worker name a client certificate (DER) carries: its first DNS
/// subject alternative name, else its subject's common name.
pub fn cert_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(d) = n {
                return Some(d.to_string());
            }
        }
    }
    cert.subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(String::from)
}

/// An interceptor admitting `allowed` roles (and admin).
pub fn interceptor(
    guard: Guard,
    allowed: &'static [Role],
    service: &'static str,
) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone + Send + Sync + 'static {
    move |mut req: Request<()>| {
        guard.check(&mut req, allowed, service)?;
        Ok(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(token: &str) -> Request<()> {
        let mut r = Request::new(());
        r.metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
        r
    }

    #[test]
    fn bound_tokens_name_their_agent_and_failures_block_the_peer() {
        let g = Guard::new(Tokens {
            agent: vec![
                "a1:0123456789abcdef-a1".into(),
                "shared-agent-token-xyz".into(),
            ],
            user: vec!["user-token-0123456789".into()],
            ..Default::default()
        });
        let mut r = req("0123456789abcdef-a1");
        g.check(&mut r, &[Role::Agent], "AgentService").unwrap();
        let id = identity_of(&r);
        assert_eq!((id.role, id.name.as_deref()), (Role::Agent, Some("a1")));
        assert!(id.may_act_as("a1") && !id.may_act_as("a2"));
        let mut r = req("shared-agent-token-xyz");
        g.check(&mut r, &[Role::Agent], "AgentService").unwrap();
        assert_eq!(identity_of(&r).name, None);
        // The user token may not call the agent protocol.
        let e = g
            .check(
                &mut req("user-token-0123456789"),
                &[Role::Agent],
                "AgentService",
            )
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        // Wrong tokens: unauthenticated until the budget is spent, then every
        // call of the peer is refused, the right token included.
        let mut codes = Vec::new();
        for i in 0..40 {
            let e = g
                .check(
                    &mut req(&format!("wrong-token-{i:08}")),
                    &[Role::Agent],
                    "AgentService",
                )
                .unwrap_err();
            codes.push(e.code());
        }
        assert_eq!(codes[0], tonic::Code::Unauthenticated);
        assert_eq!(codes[39], tonic::Code::ResourceExhausted);
        let n_unauth = codes
            .iter()
            .filter(|c| **c == tonic::Code::Unauthenticated)
            .count();
        assert!((29..=31).contains(&n_unauth), "{n_unauth}");
        let e = g
            .check(
                &mut req("0123456789abcdef-a1"),
                &[Role::Agent],
                "AgentService",
            )
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
    }
}
