//! A throwaway PostgreSQL server for tests and benchmarks: `initdb` into a
//! temporary directory, `pg_ctl start` on a free 127.0.0.1 port, stopped and
//! removed on drop. As root the server runs as the `postgres` user (the
//! server refuses root). Never used by the coordinator itself.
use std::path::{Path, PathBuf};
use std::process::Command;

/// A running server; [`PgServer::url`] names a fresh database on it.
#[derive(Debug)]
pub struct PgServer {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
    next_db: std::sync::atomic::AtomicU32,
}

fn find_bin() -> Result<PathBuf, String> {
    if let Ok(p) = std::env::var("BENCHLAKE_PG_BIN") {
        return Ok(PathBuf::from(p));
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.flatten().map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    dirs.sort();
    if let Some(d) = dirs.into_iter().rev().find(|d| d.join("pg_ctl").exists()) {
        return Ok(d);
    }
    for d in ["/usr/local/bin", "/usr/bin"] {
        if Path::new(d).join("pg_ctl").exists() && Path::new(d).join("initdb").exists() {
            return Ok(PathBuf::from(d));
        }
    }
    Err(
        "PostgreSQL server binaries (initdb, pg_ctl) not found: install the \
         `postgresql` package (scripts/test.sh does) or set BENCHLAKE_PG_BIN"
            .into(),
    )
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("free port: {e}"))
}

impl PgServer {
    /// Starts a server (about a second) with fsync off: tests need no
    /// durability across a power cut.
    pub fn start() -> Result<Self, String> {
        Self::start_with(false)
    }

    /// Starts a server; `durable` keeps PostgreSQL's default fsync and
    /// synchronous commit (benchmarks measure what a site runs).
    pub fn start_with(durable: bool) -> Result<Self, String> {
        let bin = find_bin()?;
        // /proc/self belongs to this process's effective user.
        let root = std::fs::metadata("/proc/self")
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
            .unwrap_or(false);
        let dir = std::env::temp_dir().join(format!(
            "benchlake-pg-{}-{}",
            std::process::id(),
            ulid::Ulid::new()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if root {
            let st = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(&dir)
                .status()
                .map_err(|e| format!("chown: {e}"))?;
            if !st.success() {
                return Err(format!("chown postgres {} failed", dir.display()));
            }
        }
        let mut me = Self {
            dir,
            bin,
            port: 0,
            as_postgres: root,
            next_db: std::sync::atomic::AtomicU32::new(0),
        };
        let data = me.dir.join("data");
        me.run(
            "initdb",
            &[
                "-N",
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "-D",
                &data.display().to_string(),
            ],
        )?;
        // A port taken between the probe and the start: try a few.
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port()?;
            let opts = format!(
                "-p {port} -k {} -c listen_addresses=127.0.0.1 -c max_connections=200{}",
                me.dir.display(),
                if durable { "" } else { " -c fsync=off" }
            );
            match me.run(
                "pg_ctl",
                &[
                    "-D",
                    &data.display().to_string(),
                    "-o",
                    &opts,
                    "-l",
                    &me.dir.join("log").display().to_string(),
                    "-w",
                    "start",
                ],
            ) {
                Ok(()) => {
                    me.port = port;
                    return Ok(me);
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn run(&self, tool: &str, args: &[&str]) -> Result<(), String> {
        let exe = self.bin.join(tool);
        let out = if self.as_postgres {
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(&exe)
                .args(args)
                .current_dir(&self.dir)
                .output()
        } else {
            Command::new(&exe)
                .args(args)
                .current_dir(&self.dir)
                .output()
        }
        .map_err(|e| format!("{}: {e}", exe.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{} {}: {}{}",
                exe.display(),
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Creates a new empty database and returns its URL.
    pub fn fresh_db(&self) -> Result<String, String> {
        let n = self
            .next_db
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("bl{n}");
        let admin = format!("postgres://postgres@127.0.0.1:{}/postgres", self.port);
        let c = crate::store_pg::connect(&admin).map_err(|e| e.to_string())?;
        c.batch_execute(&format!("CREATE DATABASE {name}"))
            .map_err(|e| e.to_string())?;
        Ok(format!(
            "postgres://postgres@127.0.0.1:{}/{name}",
            self.port
        ))
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let data = self.dir.join("data").display().to_string();
        let _ = self.run("pg_ctl", &["-D", &data, "-m", "immediate", "-w", "stop"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
