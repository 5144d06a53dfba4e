//! A private `redis-server` child process on a free port of 127.0.0.1.
//!
//! What `simdedup demo`, `simdedup-bench` and the test suite run against: never a
//! server someone else started (never 6379 unless the kernel hands out that
//! port), no persistence (`--save "" --appendonly no`), its working directory in
//! a fresh temporary directory. The process is killed and the directory removed
//! when the [`RedisServer`] is dropped (also on an early return or a panic that
//! unwinds).
//!
//! The binary is `$REDIS_SERVER_BIN` if set, else `redis-server` on `PATH`
//! ([`find_binary`]); when there is none, [`RedisServer::start`] returns
//! [`RedisServerError::NotInstalled`], whose message says how to install it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How to get `redis-server`, for error messages.
pub const INSTALL_HINT: &str =
    "Install it with `sudo apt-get install redis-server` (Debian/Ubuntu), \
`brew install redis` (macOS), or set REDIS_SERVER_BIN to the binary's path.";

/// Why a private server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum RedisServerError {
    #[error(
        "redis-server was not found on PATH (and REDIS_SERVER_BIN is not set). {INSTALL_HINT}"
    )]
    NotInstalled,
    #[error("cannot run {bin}: {source}. {INSTALL_HINT}")]
    Spawn {
        bin: PathBuf,
        source: std::io::Error,
    },
    #[error("{bin} did not start on a free port (5 tries)")]
    NotReady { bin: PathBuf },
    #[error("preparing a private redis-server: {0}")]
    Io(#[from] std::io::Error),
}

/// `$REDIS_SERVER_BIN`, else `redis-server` on `PATH`, if any.
pub fn find_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("REDIS_SERVER_BIN") {
        return Some(PathBuf::from(p));
    }
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|d| d.join("redis-server"))
        .find(|p| p.is_file())
}

/// Where [`free_port`] picks from: above the well-known and most registered
/// services' ports, below the kernel's ephemeral range.
const PICK_FROM: u16 = 10_240;

/// The lowest port the kernel hands out by itself (to `connect` and to a bind
/// of port 0): Linux's `ip_local_port_range`, else Linux's default.
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A port nobody listens on right now, picked at random below the ephemeral
/// range. The kernel never hands out such a port by itself, so no outgoing
/// connection of this machine takes it between this probe and the caller's
/// bind; only another process's own pick can (rarely: the range holds
/// thousands of ports, and [`RedisServer::start`] retries). When that range
/// is empty or full, a port the kernel picks.
pub fn free_port() -> std::io::Result<u16> {
    use std::hash::{BuildHasher, Hasher};
    static PICKS: AtomicU64 = AtomicU64::new(0);
    let high = ephemeral_low();
    if high > PICK_FROM {
        // Randomly keyed per process and per call: two processes probing at
        // once seldom try the same port.
        let random = std::collections::hash_map::RandomState::new();
        for _ in 0..64 {
            let mut h = random.build_hasher();
            h.write_u64(PICKS.fetch_add(1, Ordering::Relaxed));
            let port = PICK_FROM + (h.finish() % u64::from(high - PICK_FROM)) as u16;
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return Ok(port);
            }
        }
    }
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A running private `redis-server`; killed, and its directory removed, on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    port: u16,
    dir: PathBuf,
    bin: PathBuf,
}

impl RedisServer {
    /// Start a standalone server with no persistence.
    pub fn start() -> Result<RedisServer, RedisServerError> {
        Self::start_with(&[])
    }

    /// Start a server with extra `--flag value` arguments (they come after the
    /// defaults, so they may override them).
    pub fn start_with(extra: &[&str]) -> Result<RedisServer, RedisServerError> {
        let bin = find_binary().ok_or(RedisServerError::NotInstalled)?;
        Self::start_binary(&bin, extra)
    }

    /// Start `bin` with extra arguments; waits until it answers.
    pub fn start_binary(bin: &Path, extra: &[&str]) -> Result<RedisServer, RedisServerError> {
        Self::spawn(bin, |port, dir| {
            let mut cmd = Command::new(bin);
            cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(dir)
                .args(extra);
            Ok(cmd)
        })
    }

    /// Start a Redis Sentinel (`redis-server CONFIG --sentinel`) whose
    /// configuration file holds `config` (`sentinel monitor …` lines and the
    /// like) after its port and bind address. Sentinel rewrites that file as
    /// it learns the topology: it lives in the sentinel's own directory.
    pub fn start_sentinel(config: &str) -> Result<RedisServer, RedisServerError> {
        let bin = find_binary().ok_or(RedisServerError::NotInstalled)?;
        Self::spawn(&bin, |port, dir| {
            let file = dir.join("sentinel.conf");
            std::fs::write(
                &file,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {}\n{config}\n",
                    dir.display()
                ),
            )?;
            let mut cmd = Command::new(&bin);
            cmd.arg(&file).arg("--sentinel");
            Ok(cmd)
        })
    }

    /// Run `command(port, dir)` on a free port in a fresh directory until it
    /// answers.
    fn spawn(
        bin: &Path,
        command: impl Fn(u16, &Path) -> std::io::Result<Command>,
    ) -> Result<RedisServer, RedisServerError> {
        static STARTED: AtomicU64 = AtomicU64::new(0);
        // Another process may grab the port between our probe and the bind: retry.
        for _ in 0..5 {
            let port = free_port()?;
            let dir = std::env::temp_dir().join(format!(
                "simdedup-redis-{}-{}-{port}",
                std::process::id(),
                STARTED.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir)?;
            let spawned = command(port, &dir)?
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            let child = match spawned {
                Ok(c) => c,
                Err(source) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(RedisServerError::Spawn {
                        bin: bin.to_owned(),
                        source,
                    });
                }
            };
            let mut server = RedisServer {
                child,
                port,
                dir,
                bin: bin.to_owned(),
            };
            if server.wait_ready(Duration::from_secs(10)) {
                return Ok(server);
            }
            // Port taken meanwhile, or a slow start: dropping kills it; try again.
        }
        Err(RedisServerError::NotReady {
            bin: bin.to_owned(),
        })
    }

    /// Whether our child answers on our port within `limit`. The answer must
    /// come from the child itself (`INFO server`'s `process_id`): a child
    /// that failed to bind may not have exited yet, and the server that holds
    /// the port is someone else's.
    fn wait_ready(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let ours = format!("process_id:{}\r\n", self.child.id());
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            let info = redis::Client::open(self.url())
                .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
                .and_then(|mut c| redis::cmd("INFO").arg("server").query::<String>(&mut c));
            if info.is_ok_and(|i| i.contains(&ours)) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The binary that runs.
    pub fn binary(&self) -> &Path {
        &self.bin
    }

    /// The server's working directory (removed on drop).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The process id of the server.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kill the server at once (SIGKILL: no shutdown, no last words to its
    /// replicas), as a crashed machine would; the directory stays until drop.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// A new synchronous connection.
    pub fn connection(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(self.url())?.get_connection()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child that has not bound its port (here: one that never will) is
    /// not ready, even while another server answers on that port.
    #[test]
    fn only_the_child_itself_is_ready() {
        let other = RedisServer::start().expect("these tests start their own redis-server");
        let dir = std::env::temp_dir().join(format!("simdedup-ready-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut impostor = RedisServer {
            child: Command::new("sleep").arg("30").spawn().unwrap(),
            port: other.port(),
            dir,
            bin: PathBuf::from("sleep"),
        };
        assert!(!impostor.wait_ready(Duration::from_millis(500)));
    }

    /// A picked port is outside the range the kernel takes outgoing
    /// connections' ports from, and bindable (but for the rare one the
    /// servers of tests running beside this one pick at the same moment).
    #[test]
    fn free_ports_are_below_the_ephemeral_range() {
        let mut taken = 0;
        for _ in 0..100 {
            let port = free_port().unwrap();
            assert!((PICK_FROM..ephemeral_low()).contains(&port), "{port}");
            taken += usize::from(TcpListener::bind(("127.0.0.1", port)).is_err());
        }
        assert!(taken <= 5, "{taken} of 100 picked ports could not be bound");
    }

    #[test]
    fn missing_binary_says_how_to_install() {
        let e = RedisServer::start_binary(Path::new("/nonexistent/redis-server"), &[]).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, RedisServerError::Spawn { .. }), "{msg}");
        assert!(msg.contains("apt-get install redis-server"), "{msg}");
        assert!(RedisServerError::NotInstalled
            .to_string()
            .contains("apt-get install redis-server"));
    }
}
