//! Listening sockets and the stop signal the coordinator's servers share.
//!
//! A restart must find its ports free as soon as the old process is told to
//! stop, even while that process still drains calls in flight (a worker's
//! long poll, a `WatchRun` stream): every listening socket is opened with
//! `SO_REUSEADDR` ([`bind`]; connections of the old process in `TIME_WAIT`
//! then do not block the new bind), and one [`Stop`] tells the gRPC and the
//! HTTP server to close their listeners at the same moment, before either
//! drains.
use std::future::Future;

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;

/// The backlog of a listening socket (the standard library's).
const BACKLOG: u32 = 1024;

/// Binds a listening socket on `addr` (`host:port`; the first address it
/// resolves to that binds) with `SO_REUSEADDR` set.
pub async fn bind(addr: &str) -> std::io::Result<TcpListener> {
    let mut last = None;
    for a in tokio::net::lookup_host(addr).await? {
        match bind_one(a) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{addr} resolves to no address"),
        )
    }))
}

/// Binds `addr` with `SO_REUSEADDR`.
pub fn bind_one(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let s = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    s.set_reuseaddr(true)?;
    s.bind(addr)?;
    s.listen(BACKLOG)
}

/// A stop signal for several servers: raised when the shutdown future given
/// to [`Stop::on`] resolves, or when the `Stop` is dropped.
#[derive(Debug)]
pub struct Stop {
    tx: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Stop {
    /// Raises the signal when `shutdown` resolves.
    pub fn on(shutdown: impl Future<Output = ()> + Send + 'static) -> Self {
        let (tx, _) = watch::channel(false);
        let t = tx.clone();
        let task = tokio::spawn(async move {
            shutdown.await;
            let _ = t.send(true);
        });
        Self { tx, task }
    }

    /// Resolves once the signal is raised (at once when it already is).
    pub fn signal(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.tx.subscribe();
        async move {
            while !*rx.borrow_and_update() {
                if rx.changed().await.is_err() {
                    return;
                }
            }
        }
    }
}

impl Drop for Stop {
    fn drop(&mut self) {
        self.task.abort();
        let _ = self.tx.send(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_stop_reaches_every_server_once_raised_or_dropped() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let stop = Stop::on(async move {
            let _ = rx.await;
        });
        let a = tokio::spawn(stop.signal());
        let b = tokio::spawn(stop.signal());
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!a.is_finished() && !b.is_finished());
        tx.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), a)
            .await
            .unwrap()
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), b)
            .await
            .unwrap()
            .unwrap();
        // Raised already: a later waiter returns at once.
        tokio::time::timeout(Duration::from_secs(5), stop.signal())
            .await
            .unwrap();
        let stop = Stop::on(std::future::pending());
        let c = tokio::spawn(stop.signal());
        drop(stop);
        tokio::time::timeout(Duration::from_secs(5), c)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn a_closed_listener_frees_its_port_at_once() {
        let l = bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        // A connection the old listener accepted stays open (draining).
        let client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (server_side, _) = l.accept().await.unwrap();
        drop(l);
        let again = bind(&addr.to_string())
            .await
            .expect("the port is free again");
        assert_eq!(again.local_addr().unwrap(), addr);
        drop((client, server_side));
    }
}
