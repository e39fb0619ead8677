//! Bearer-token authentication: a tonic interceptor per service that maps the
//! `authorization: Bearer <token>` header to a [`Role`], refuses roles the
//! service does not serve, and leaves the role in the request extensions for
//! finer checks (draining agents is admin-only). Tokens are never logged.
use tonic::{Request, Status};

use crate::config::{Role, Tokens};

/// The role of the caller, as set by the interceptor.
pub fn role_of<T>(req: &Request<T>) -> Role {
    req.extensions()
        .get::<Role>()
        .copied()
        .unwrap_or(Role::Admin)
}

/// Requires one of `allowed` roles (admin always passes).
pub fn require<T>(req: &Request<T>, allowed: &[Role]) -> Result<(), Status> {
    let r = role_of(req);
    if r == Role::Admin || allowed.contains(&r) {
        Ok(())
    } else {
        Err(Status::permission_denied(format!(
            "the {} role may not call this method",
            r.as_str()
        )))
    }
}

/// An interceptor admitting `allowed` roles (and admin).
pub fn interceptor(
    tokens: Tokens,
    allowed: &'static [Role],
    service: &'static str,
) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone + Send + Sync + 'static {
    move |mut req: Request<()>| {
        if !tokens.enabled() {
            req.extensions_mut().insert(Role::Admin);
            return Ok(req);
        }
        let header = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let token = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
            .unwrap_or("")
            .trim();
        if token.is_empty() {
            return Err(Status::unauthenticated(
                "missing 'authorization: Bearer <token>' metadata",
            ));
        }
        let Some(role) = tokens.role_of(token) else {
            return Err(Status::unauthenticated("unknown token"));
        };
        if role != Role::Admin && !allowed.contains(&role) {
            return Err(Status::permission_denied(format!(
                "the {} role may not call {service}",
                role.as_str()
            )));
        }
        req.extensions_mut().insert(role);
        Ok(req)
    }
}
