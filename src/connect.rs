//! One connection type to Redis, whatever the deployment: a single node, a
//! Redis Cluster, or a primary found through Redis Sentinel.
//!
//! Every part of simdedup that talks to Redis (the worker's streams, the index,
//! `produce`, `stats`, `inspect`, `demo`, the bench) opens a [`Conn`] from the
//! same URL setting, so a deployment is described once:
//!
//! - `redis://HOST:PORT/` (or `rediss://` for TLS): one node, or **any node of
//!   a cluster**: cluster mode is detected at start (`INFO cluster`).
//! - `redis://A:PORT,redis://B:PORT,…`: several seed nodes of one cluster, any
//!   of which may be down when a process starts.
//! - `redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT…]/MASTER_NAME[/DB]`
//!   (`rediss+sentinel://` for TLS to the sentinels and the data nodes): the
//!   primary named `MASTER_NAME` is asked of the sentinels, and asked again
//!   when it stops answering as a primary. `USER:PASSWORD` authenticate to the
//!   data nodes; the query parameters `sentinel_username` and
//!   `sentinel_password` to the sentinels, when they require it.
//!
//! A namespace's keys all carry the hash tag `{NS}` (`src/keys.rs`): one slot,
//! one primary, so every script and pipeline stays legal on a cluster.

use std::sync::{Arc, Mutex as SyncMutex};
use std::time::Duration;

use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ErrorKind, Pipeline, RedisError, RedisFuture,
    RedisResult, ServerErrorKind, TlsMode, Value,
};

use crate::redact::{percent_decode, redact_url, scrub};
use crate::transient::is_transient;

/// Why no connection could be opened.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The URL setting is malformed.
    #[error("bad Redis URL {url}: {source}")]
    Url {
        url: String,
        #[source]
        source: UrlError,
    },
    /// The URL cannot work however long one waits: the Redis client refuses
    /// it, or the server refuses the connection (a wrong password). `reason`
    /// is the client's message, scrubbed of the URL's secrets.
    #[error("bad Redis URL {url}: {reason}")]
    Config { url: String, reason: String },
    /// Redis (or every sentinel) did not answer: worth a retry.
    #[error("cannot reach Redis at {url}: {source}")]
    Unavailable {
        url: String,
        #[source]
        source: RedisError,
    },
}

/// Single node or Redis Cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Topology {
    /// Ask the server (`INFO cluster`): cluster if `cluster_enabled:1`.
    #[default]
    Auto,
    Standalone,
    Cluster,
}

/// Timeouts and the deployment kind to assume.
#[derive(Debug, Clone, Copy)]
pub struct ConnectOptions {
    /// Single node or cluster; `Auto` asks the first seed that answers.
    /// Ignored for `redis+sentinel://` URLs.
    pub topology: Topology,
    /// Longest wait for one reply. A blocking read needs its block time more.
    pub response_timeout: Duration,
    pub connection_timeout: Duration,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            topology: Topology::Auto,
            response_timeout: Duration::from_secs(2),
            connection_timeout: Duration::from_secs(5),
        }
    }
}

/// A multiplexed, self-reconnecting connection: cheap to clone, one per task.
#[derive(Clone)]
pub enum Conn {
    /// [`ConnectionManager`] reconnects with backoff after a dropped connection.
    Single(ConnectionManager),
    /// Routes each command by key slot, follows MOVED/ASK redirections and
    /// learns the new slot map after a failover.
    Cluster(ClusterConnection),
    /// The primary the sentinels name, found again after a failover.
    Sentinel(Arc<SentinelConn>),
}

/// What a URL setting names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// One node or seeds of one cluster (URLs as given).
    Nodes(Vec<String>),
    Sentinel(SentinelTarget),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct SentinelTarget {
    sentinels: Vec<(String, u16)>,
    master: String,
    tls: bool,
    db: i64,
    username: Option<String>,
    password: Option<String>,
    sentinel_username: Option<String>,
    sentinel_password: Option<String>,
}

/// Why a URL ending in `#insecure` is refused.
pub const INSECURE_REFUSED: &str = "a URL ending in #insecure (TLS without checking the server's \
    certificate) is refused: to trust a server whose certificate a private CA signed, set \
    SSL_CERT_FILE to a PEM file with that CA";

/// What is malformed in a Redis URL setting. The parts of the URL it quotes
/// are scrubbed of the URL's secrets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// A URL ending in `#insecure`: TLS that skips the certificate's check.
    #[error("{}", INSECURE_REFUSED)]
    Insecure,
    #[error("empty Redis URL")]
    Empty,
    /// A Sentinel URL without the name of the primary's group.
    #[error("no master name: use redis+sentinel://HOST:PORT[,HOST:PORT…]/MASTER_NAME")]
    NoMasterName,
    /// A sentinel's `HOST:PORT` whose port is not a number.
    #[error("bad sentinel port in {0:?}")]
    SentinelPort(String),
    /// The sentinels' list, one of whose hosts is empty.
    #[error("empty sentinel host in {0:?}")]
    SentinelHost(String),
    #[error("bad database number {0:?}")]
    Database(String),
    /// A query parameter a Sentinel URL does not take.
    #[error("unknown parameter {0:?} (sentinel_username, sentinel_password)")]
    Parameter(String),
}

fn parse(url: &str) -> Result<Target, UrlError> {
    let url = url.trim();
    let quote = |part: &str| scrub(part, url);
    // Certificates are always checked: the redis crate would turn the check
    // off for `#insecure` (its `tls-rustls-insecure` feature, not built in);
    // refused here by name rather than by the crate's generic error.
    if url
        .split(',')
        .any(|u| u.trim().to_ascii_lowercase().ends_with("#insecure"))
    {
        return Err(UrlError::Insecure);
    }
    let (tls, rest) = if let Some(r) = url.strip_prefix("redis+sentinel://") {
        (false, r)
    } else if let Some(r) = url.strip_prefix("rediss+sentinel://") {
        (true, r)
    } else {
        let seeds: Vec<String> = url
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        if seeds.is_empty() {
            return Err(UrlError::Empty);
        }
        return Ok(Target::Nodes(seeds));
    };
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    // The user information runs to the last `@` (a password may hold `/`).
    // Nothing of it goes into an error message.
    let (userinfo, rest) = match rest.rsplit_once('@') {
        Some((u, r)) => (Some(u), r),
        None => (None, rest),
    };
    let (hosts, path) = rest.split_once('/').ok_or(UrlError::NoMasterName)?;
    let (username, password) = match userinfo {
        None => (None, None),
        Some(u) => match u.split_once(':') {
            Some((user, pass)) => (
                (!user.is_empty()).then(|| percent_decode(user)),
                Some(percent_decode(pass)),
            ),
            None => (None, Some(percent_decode(u))),
        },
    };
    let sentinels = hosts
        .split(',')
        .map(|h| {
            let (host, port) = match h.rsplit_once(':') {
                Some((host, port)) => (
                    host,
                    port.parse::<u16>()
                        .map_err(|_| UrlError::SentinelPort(quote(h)))?,
                ),
                None => (h, 26379),
            };
            if host.is_empty() {
                return Err(UrlError::SentinelHost(quote(hosts)));
            }
            Ok((host.to_owned(), port))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut parts = path.splitn(2, '/');
    let master = percent_decode(parts.next().unwrap_or_default());
    if master.is_empty() {
        return Err(UrlError::NoMasterName);
    }
    let db = match parts.next().filter(|d| !d.is_empty()) {
        None => 0,
        Some(d) => d.parse().map_err(|_| UrlError::Database(quote(d)))?,
    };
    let mut target = SentinelTarget {
        sentinels,
        master,
        tls,
        db,
        username,
        password,
        sentinel_username: None,
        sentinel_password: None,
    };
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "sentinel_username" => target.sentinel_username = Some(percent_decode(v)),
            "sentinel_password" => target.sentinel_password = Some(percent_decode(v)),
            _ => return Err(UrlError::Parameter(quote(k))),
        }
    }
    Ok(Target::Sentinel(target))
}

/// Check a URL setting's form without connecting: what a process checks at
/// start, so that a typo fails at once instead of being retried.
pub fn validate_url(url: &str) -> Result<(), String> {
    match parse(url).map_err(|e| e.to_string())? {
        Target::Nodes(seeds) => seeds.iter().try_for_each(|seed| {
            redis::Client::open(seed.as_str())
                .map(drop)
                .map_err(|e| scrub(&format!("bad Redis URL {}: {e}", redact_url(seed)), url))
        }),
        Target::Sentinel(_) => Ok(()),
    }
}

impl Conn {
    /// Connect to what `url` names (see the module documentation for the forms).
    pub async fn connect(url: &str, options: &ConnectOptions) -> Result<Conn, ConnectError> {
        let shown = redact_url(url);
        let bad = |reason: String| ConnectError::Config {
            url: shown.clone(),
            reason: scrub(&reason, url),
        };
        let down = |source: RedisError| ConnectError::Unavailable {
            url: shown.clone(),
            source,
        };
        let malformed = |source| ConnectError::Url {
            url: shown.clone(),
            source,
        };
        match parse(url).map_err(malformed)? {
            Target::Sentinel(t) => {
                let conn = SentinelConn::new(&t, options).map_err(|e| bad(e.to_string()))?;
                conn.current().await.map_err(down)?;
                let conn = Arc::new(conn);
                SentinelConn::follow(&conn);
                Ok(Conn::Sentinel(conn))
            }
            Target::Nodes(seeds) => {
                let cluster = match options.topology {
                    Topology::Standalone => false,
                    Topology::Cluster => true,
                    Topology::Auto => detect_cluster(&seeds, options)
                        .await
                        .map_err(|e| classify(e, &bad, &down))?,
                };
                if cluster {
                    let client = ClusterClient::builder(seeds.iter().map(String::as_str))
                        .response_timeout(options.response_timeout)
                        .connection_timeout(options.connection_timeout)
                        .build()
                        .map_err(|e| bad(e.to_string()))?;
                    let conn = client
                        .get_async_connection()
                        .await
                        .map_err(|e| classify(e, &bad, &down))?;
                    return Ok(Conn::Cluster(conn));
                }
                if seeds.len() > 1 {
                    return Err(bad(
                        "several URLs name the seed nodes of a cluster, and this node is not in cluster mode"
                            .into(),
                    ));
                }
                let client =
                    redis::Client::open(seeds[0].as_str()).map_err(|e| bad(e.to_string()))?;
                let cfg = ConnectionManagerConfig::new()
                    .set_response_timeout(Some(options.response_timeout))
                    .set_connection_timeout(Some(options.connection_timeout));
                let conn = ConnectionManager::new_with_config(client, cfg)
                    .await
                    .map_err(|e| classify(e, &bad, &down))?;
                Ok(Conn::Single(conn))
            }
        }
    }

    /// Run `cmd` (a keyless admin command such as `CONFIG GET` or `INFO`) on
    /// the primary that holds `key`'s slot: on a cluster, the one serving the
    /// namespace whose keys carry the same hash tag.
    pub async fn query_on_primary_of<T: redis::FromRedisValue>(
        &mut self,
        key: &str,
        cmd: Cmd,
    ) -> RedisResult<T> {
        match self {
            Conn::Cluster(c) => {
                let route = Route::new(key_slot(key.as_bytes()), SlotAddr::Master);
                let v = c
                    .route_command(
                        cmd,
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                    )
                    .await?;
                Ok(redis::from_redis_value(v)?)
            }
            other => cmd.query_async(other).await,
        }
    }
}

/// A command error or an unreachable node: which of the two.
fn classify(
    e: RedisError,
    bad: &dyn Fn(String) -> ConnectError,
    down: &dyn Fn(RedisError) -> ConnectError,
) -> ConnectError {
    if is_transient(&e) || e.kind() == ErrorKind::Io {
        down(e)
    } else if matches!(
        e.kind(),
        ErrorKind::InvalidClientConfig | ErrorKind::AuthenticationFailed
    ) {
        bad(e.to_string())
    } else {
        down(e)
    }
}

/// Ask the seeds in turn (the first may be down) whether they run in cluster mode.
async fn detect_cluster(seeds: &[String], options: &ConnectOptions) -> RedisResult<bool> {
    let mut last = None;
    for seed in seeds {
        let client = redis::Client::open(seed.as_str())?;
        let cfg = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(options.connection_timeout))
            .set_response_timeout(Some(options.response_timeout));
        let attempt = async {
            let mut c = client
                .get_multiplexed_async_connection_with_config(&cfg)
                .await?;
            redis::cmd("INFO")
                .arg("cluster")
                .query_async::<String>(&mut c)
                .await
        };
        match attempt.await {
            Ok(info) => return Ok(info.lines().any(|l| l.trim() == "cluster_enabled:1")),
            Err(e) if seeds.len() > 1 && is_transient(&e) => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.expect("at least one seed"))
}

/// How often each connection asks a sentinel which node is the primary. A
/// failover requested with `SENTINEL FAILOVER` leaves the old primary
/// answering as a primary until the sentinels turn it into a replica (their
/// next look at it, up to 10 s later): nothing the old node says shows the
/// switch, so the connection has to ask.
pub const SENTINEL_POLL: Duration = Duration::from_millis(250);

/// The primary of a Sentinel-monitored group. Holds one multiplexed connection
/// to the primary the sentinels last named. It is dropped, and the sentinels
/// asked again by the next command, when it fails (a dropped connection), when
/// it answers `READONLY` (the node was demoted: the command did not run, and
/// runs once more on the new primary), or when a sentinel names another node
/// (asked every [`SENTINEL_POLL`]); the commands then in flight on it,
/// a blocking read among them, end with a transient error at once.
pub struct SentinelConn {
    /// Asking the sentinels, one task at a time.
    sentinels: tokio::sync::Mutex<SentinelClient>,
    config: AsyncConnectionConfig,
    /// The connection in use, the primary's address, and how many times the
    /// primary was looked up, so that of several tasks seeing one failure
    /// only the first asks again.
    primary: SyncMutex<(u64, Option<Primary>)>,
    /// The last generation dropped: in-flight commands of it give up.
    dropped: tokio::sync::watch::Sender<u64>,
    /// A connection to one sentinel, for [`SentinelConn::follow`].
    watch: tokio::sync::Mutex<Option<MultiplexedConnection>>,
    master: String,
}

/// The connection in use and the address of its node.
struct Primary {
    conn: MultiplexedConnection,
    addr: (String, u16),
}

fn host_port(addr: &ConnectionAddr) -> (String, u16) {
    match addr {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            (host.clone(), *port)
        }
        other => (other.to_string(), 0),
    }
}

/// A failure that says "not now": the worker and the index retry it.
fn not_now(why: &'static str) -> RedisError {
    RedisError::from(std::io::Error::new(std::io::ErrorKind::NotConnected, why))
}

impl SentinelConn {
    fn new(t: &SentinelTarget, options: &ConnectOptions) -> RedisResult<SentinelConn> {
        let addrs = t.sentinels.iter().map(|(host, port)| {
            if t.tls {
                ConnectionAddr::TcpTls {
                    host: host.clone(),
                    port: *port,
                    insecure: false,
                    tls_params: None,
                }
            } else {
                ConnectionAddr::Tcp(host.clone(), *port)
            }
        });
        let mut b = SentinelClientBuilder::new(addrs, &t.master, SentinelServerType::Master)?
            .set_client_to_redis_db(t.db);
        if t.tls {
            b = b
                .set_client_to_redis_tls_mode(TlsMode::Secure)
                .set_client_to_sentinel_tls_mode(TlsMode::Secure);
        }
        if let Some(u) = &t.username {
            b = b.set_client_to_redis_username(u);
        }
        if let Some(p) = &t.password {
            b = b.set_client_to_redis_password(p);
        }
        if let Some(u) = &t.sentinel_username {
            b = b.set_client_to_sentinel_username(u);
        }
        if let Some(p) = &t.sentinel_password {
            b = b.set_client_to_sentinel_password(p);
        }
        Ok(SentinelConn {
            sentinels: tokio::sync::Mutex::new(b.build()?),
            config: AsyncConnectionConfig::new()
                .set_connection_timeout(Some(options.connection_timeout))
                .set_response_timeout(Some(options.response_timeout)),
            primary: SyncMutex::new((0, None)),
            dropped: tokio::sync::watch::Sender::new(0),
            watch: tokio::sync::Mutex::new(None),
            master: t.master.clone(),
        })
    }

    /// Ask a sentinel every [`SENTINEL_POLL`] which node is the primary, and
    /// drop the connection when it names another, for as long as `conn` is
    /// in use.
    fn follow(conn: &Arc<SentinelConn>) {
        let weak = Arc::downgrade(conn);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(SENTINEL_POLL).await;
                let Some(conn) = weak.upgrade() else {
                    return;
                };
                if let Err(e) = conn.check().await {
                    tracing::debug!(error = %e, "asking a sentinel for the primary failed");
                    *conn.watch.lock().await = None;
                }
            }
        });
    }

    /// Drop the connection if a sentinel names a primary other than its node.
    async fn check(&self) -> RedisResult<()> {
        let (generation, addr) = match &*self.primary.lock().expect("not poisoned") {
            (generation, Some(p)) => (*generation, p.addr.clone()),
            _ => return Ok(()),
        };
        let mut watch = self.watch.lock().await;
        if watch.is_none() {
            let client = self
                .sentinels
                .lock()
                .await
                .async_get_sentinel_client()
                .await?;
            *watch = Some(
                client
                    .get_multiplexed_async_connection_with_config(&self.config)
                    .await?,
            );
        }
        let named: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.master)
            .query_async(watch.as_mut().expect("just set"))
            .await?;
        if named.is_some_and(|named| named != addr) {
            tracing::warn!(
                "the sentinels name a new Redis primary; leaving {}:{}",
                addr.0,
                addr.1
            );
            self.forget(generation);
        }
        Ok(())
    }

    /// The connection to the current primary, looked up if there is none.
    async fn current(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        if let (generation, Some(p)) = &*self.primary.lock().expect("not poisoned") {
            return Ok((*generation, p.conn.clone()));
        }
        let mut sentinels = self.sentinels.lock().await;
        // Another task may have looked it up while this one waited.
        let generation = {
            let guard = self.primary.lock().expect("not poisoned");
            if let (generation, Some(p)) = &*guard {
                return Ok((*generation, p.conn.clone()));
            }
            guard.0
        };
        let client = sentinels.async_get_client().await.map_err(|e| {
            if e.kind() == ErrorKind::MasterNameNotFoundBySentinel {
                // Midway through a failover: no node answers as the primary yet.
                not_now("no node the sentinels name answers as the primary yet")
            } else {
                e
            }
        })?;
        let addr = host_port(client.get_connection_info().addr());
        let conn = client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        let mut guard = self.primary.lock().expect("not poisoned");
        *guard = (
            generation + 1,
            Some(Primary {
                conn: conn.clone(),
                addr,
            }),
        );
        Ok((generation + 1, conn))
    }

    /// Forget the connection of `generation` (not a newer one), and end the
    /// commands in flight on it.
    fn forget(&self, generation: u64) {
        let mut guard = self.primary.lock().expect("not poisoned");
        if guard.0 == generation {
            guard.1 = None;
            self.dropped.send_replace(generation);
        }
    }

    /// `request` on the connection of `generation`, ended early if that
    /// connection is dropped meanwhile.
    async fn send_on(
        &self,
        generation: u64,
        conn: &mut MultiplexedConnection,
        request: Request<'_>,
    ) -> RedisResult<Vec<Value>> {
        let mut dropped = self.dropped.subscribe();
        tokio::select! {
            r = request.send(conn) => r,
            _ = dropped.wait_for(|g| *g >= generation) => {
                Err(not_now("the sentinels named a new primary"))
            }
        }
    }

    async fn send(&self, request: Request<'_>) -> RedisResult<Vec<Value>> {
        let (generation, mut conn) = self.current().await?;
        match self.send_on(generation, &mut conn, request).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly) => {
                self.forget(generation);
                tracing::warn!(
                    "the Redis primary was demoted; asking the sentinels for the new one"
                );
                let (generation, mut conn) = self.current().await?;
                self.send_on(generation, &mut conn, request).await
            }
            Err(e) if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() => {
                self.forget(generation);
                Err(e)
            }
            r => r,
        }
    }
}

/// One command or a slice of a pipeline, as [`ConnectionLike`] sends them.
#[derive(Clone, Copy)]
enum Request<'a> {
    Cmd(&'a Cmd),
    Pipeline(&'a Pipeline, usize, usize),
}

impl Request<'_> {
    async fn send(self, conn: &mut MultiplexedConnection) -> RedisResult<Vec<Value>> {
        match self {
            Request::Cmd(cmd) => Ok(vec![conn.req_packed_command(cmd).await?]),
            Request::Pipeline(p, offset, count) => conn.req_packed_commands(p, offset, count).await,
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
            Conn::Sentinel(s) => Box::pin(async move {
                let mut values = s.send(Request::Cmd(cmd)).await?;
                Ok(values.pop().unwrap_or(Value::Nil))
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Sentinel(s) => {
                Box::pin(async move { s.send(Request::Pipeline(pipeline, offset, count)).await })
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
            Conn::Sentinel(_) => 0,
        }
    }
}

/// Redis Cluster hash slot of a key (CRC16/XMODEM of the hash tag, mod 16384).
pub fn key_slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for &b in tagged {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_hash_tag() {
        // Reference values from `CLUSTER KEYSLOT` (Redis 7.0.15;
        // tests/it/redis_index.rs asks a server for more).
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"123456789"), 12739);
        assert_eq!(key_slot(b"simdedup:{foo}:in"), 12182);
        // An empty tag, or none closed: the whole key.
        assert_eq!(key_slot(b"a{}b"), 13694);
        assert_eq!(key_slot(b"{}"), 15257);
        assert_eq!(key_slot(b"{a"), 10276);
        // The first tag only, from the first `{` to the next `}`.
        assert_eq!(key_slot(b"a}b{c}"), 7365);
        assert_eq!(key_slot(b"{{x}}"), 11068);
        assert_eq!(key_slot(b"x{}{y}"), 14166);
        assert_eq!(key_slot(b""), 0);
    }

    #[test]
    fn node_urls_are_seeds() {
        assert_eq!(
            parse(" redis://a:1/ , rediss://b:2/,").unwrap(),
            Target::Nodes(vec!["redis://a:1/".into(), "rediss://b:2/".into()])
        );
        assert_eq!(parse(" , "), Err(UrlError::Empty));
    }

    #[test]
    fn sentinel_urls() {
        let Target::Sentinel(t) = parse("redis+sentinel://h1:26379,h2:5000/mymaster").unwrap()
        else {
            panic!()
        };
        assert_eq!(t.sentinels, vec![("h1".into(), 26379), ("h2".into(), 5000)]);
        assert_eq!((t.master.as_str(), t.tls, t.db), ("mymaster", false, 0));
        assert_eq!((t.username, t.password), (None, None));

        let Target::Sentinel(t) = parse(
            "rediss+sentinel://app:p%40ss@h1/main/3?sentinel_username=s&sentinel_password=x%2Fy",
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(t.sentinels, vec![("h1".into(), 26379)]);
        assert_eq!((t.master.as_str(), t.tls, t.db), ("main", true, 3));
        assert_eq!(t.username.as_deref(), Some("app"));
        assert_eq!(t.password.as_deref(), Some("p@ss"));
        assert_eq!(t.sentinel_username.as_deref(), Some("s"));
        assert_eq!(t.sentinel_password.as_deref(), Some("x/y"));

        let Target::Sentinel(t) = parse("redis+sentinel://:pw@h:1/m").unwrap() else {
            panic!()
        };
        assert_eq!((t.username, t.password.as_deref()), (None, Some("pw")));
    }

    #[test]
    fn bad_sentinel_urls_say_why() {
        for (url, why) in [
            ("redis+sentinel://h:1", UrlError::NoMasterName),
            ("redis+sentinel://h:1/", UrlError::NoMasterName),
            (
                "redis+sentinel://h:x/m",
                UrlError::SentinelPort("h:x".into()),
            ),
            (
                "redis+sentinel://h:1,:2/m",
                UrlError::SentinelHost("h:1,:2".into()),
            ),
            (
                "redis+sentinel://h:1/m/zero",
                UrlError::Database("zero".into()),
            ),
            (
                "redis+sentinel://h:1/m?password=x",
                UrlError::Parameter("password".into()),
            ),
        ] {
            assert_eq!(parse(url), Err(why), "{url}");
        }
    }

    #[test]
    fn failover_errors_are_transient() {
        let readonly = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ReadOnly),
            "You can't write against a read only replica.",
        ));
        assert!(is_transient(&readonly));
        let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(is_transient(&io));
        let wrong = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "WRONGTYPE",
        ));
        assert!(!is_transient(&wrong));
    }

    #[test]
    fn a_sentinel_url_that_fails_to_parse_does_not_echo_its_password() {
        for (url, secrets) in crate::redact::tests::SECRET_URLS {
            if let Err(e) = validate_url(url) {
                for secret in *secrets {
                    assert!(!e.contains(secret), "{url}: {e}");
                }
            }
        }
        let e = validate_url("redis+sentinel://app:DataPW@:26379/m").unwrap_err();
        assert!(e.contains("empty sentinel host"), "{e}");
        assert!(!e.contains("DataPW"), "{e}");
    }
}
