//! Client-side helpers shared by the agent, the worker and the CLI: connecting to
//! the coordinator and attaching the bearer token to every call.
use tonic::metadata::MetadataValue;
use tonic::service::Interceptor;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};

/// Adds `authorization: Bearer <token>` to every request (nothing when no token).
#[derive(Clone, Default)]
pub struct Auth(Option<MetadataValue<tonic::metadata::Ascii>>);

impl std::fmt::Debug for Auth {
    // The token is a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Auth({})",
            if self.0.is_some() { "token" } else { "none" }
        )
    }
}

impl Auth {
    /// An interceptor sending `token` (empty or None = no header).
    pub fn new(token: Option<&str>) -> Result<Self, String> {
        match token.map(str::trim).filter(|t| !t.is_empty()) {
            None => Ok(Self(None)),
            Some(t) => format!("Bearer {t}")
                .parse()
                .map(|v| Self(Some(v)))
                .map_err(|_| "the token holds characters not allowed in a header".to_string()),
        }
    }
}

impl Interceptor for Auth {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// Normalises `host:port` to `http://host:port`.
pub fn endpoint_url(addr: &str) -> String {
    if addr.starts_with("http://") || addr.starts_with("https://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    }
}

/// A lazily connecting channel to the coordinator at `addr`.
pub fn channel(addr: &str) -> Result<Channel, String> {
    let ep = Endpoint::from_shared(endpoint_url(addr))
        .map_err(|e| format!("coordinator address '{addr}': {e}"))?
        .connect_timeout(std::time::Duration::from_secs(5))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(std::time::Duration::from_secs(30))
        .keep_alive_while_idle(true);
    Ok(ep.connect_lazy())
}
