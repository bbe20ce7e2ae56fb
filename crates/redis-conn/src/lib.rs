//! One Redis connection type for one server or a Redis Cluster. redis-rs
//! has no common type for the two (redis-rs issue 1813); an enum that
//! implements `ConnectionLike` gets every `AsyncCommands` method through
//! the blanket impl, so the callers keep one code path and only the few
//! things a cluster does differently (which nodes to scan or subscribe
//! through, which node a `WAIT` must reach) live here.
//!
//! On a cluster every command is routed by its first key; a script, a
//! pipeline or a transaction must keep its keys in one slot (hash tags).

/// The replicas' acknowledgement of a write (a module of its own because it
/// builds on [`Redis`]; the crate root does not re-export it back).
pub mod barrier;
/// Which hash tags crowd their master, counted as commands go out.
pub mod hot;
/// Slots, and the masters that serve them.
pub mod slots;
/// A pattern subscription that outlives its node.
pub mod subscription;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use redis::{
    Cmd, FromRedisValue, Pipeline, RedisError, RedisFuture, RedisResult, Value,
    aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig},
    cluster::{ClusterClient, ClusterClientBuilder},
    cluster_async::ClusterConnection,
    cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr},
};

/// Redis could not be reached, did not answer in time, or said it cannot
/// serve yet, as opposed to a command it refused: the callers answer 503
/// and may ask again. Besides a dead or slow server that covers a cluster
/// in motion, whose redirects outlasted the client's retries (mid-failover
/// a replica answers `MOVED` to its dead master until it is promoted) and
/// LOADING, TRYAGAIN, MASTERDOWN and CLUSTERDOWN.
pub fn unavailable(err: &RedisError) -> bool {
    use redis::RetryMethod;
    err.is_io_error()
        || err.is_connection_dropped()
        || err.is_timeout()
        || err.is_connection_refusal()
        || matches!(
            err.retry_method(),
            RetryMethod::WaitAndRetry
                | RetryMethod::MovedRedirect
                | RetryMethod::AskRedirect
                | RetryMethod::RefreshSlotsAndRetry
                | RetryMethod::ReconnectFromInitialConnections
        )
}

/// Where Redis is: one server (`REDIS_URL`) or the seed nodes of a cluster
/// (`REDIS_CLUSTER_NODES`), and the certificate authority that signs their
/// certificates when the links are TLS (`rediss://`).
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    target: Target,
    /// PEM; `None` trusts the system's roots.
    tls_roots: Option<Arc<[u8]>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Target {
    Single(String),
    Cluster(Vec<String>),
}

/// The URLs hold passwords: what is shown is `describe`'s.
impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("target", &self.describe())
            .field("tls_roots", &self.tls_roots.as_ref().map(|_| "<set>"))
            .finish()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("REDIS_CLUSTER_NODES: {0}")]
    BadNodes(String),
    #[error(
        "a certificate authority is given for Redis, but {0} is not a TLS URL (rediss://): the password would cross \
         the network in the clear"
    )]
    RootsWithoutTls(String),
    #[error(transparent)]
    Redis(#[from] RedisError),
    #[error("the Redis Cluster at {nodes} does not serve every slot ({detail}); was `redis-cli --cluster create` run?")]
    Incomplete { nodes: String, detail: String },
    #[error("Redis at {0} did not answer within {1:?}")]
    Timeout(String, Duration),
}

/// How long start-up waits for Redis before it gives up with an error.
const CONNECT_DEADLINE: Duration = Duration::from_secs(10);

impl Endpoint {
    /// `cluster_nodes` (comma-separated `host:port` or `redis://` URLs)
    /// wins over `url` when it is set and not blank.
    pub fn new(url: &str, cluster_nodes: Option<&str>) -> Result<Self, ConnectError> {
        let Some(nodes) = cluster_nodes.map(str::trim).filter(|n| !n.is_empty()) else {
            return Ok(Self { target: Target::Single(url.to_owned()), tls_roots: None });
        };
        let nodes: Vec<String> = nodes
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(|n| if n.contains("://") { n.to_owned() } else { format!("redis://{n}") })
            .collect();
        for node in &nodes {
            redis::Client::open(node.as_str()).map_err(|e| ConnectError::BadNodes(format!("{node}: {e}")))?;
        }
        if nodes.is_empty() {
            return Err(ConnectError::BadNodes("no node given".into()));
        }
        Ok(Self { target: Target::Cluster(nodes), tls_roots: None })
    }

    /// Trusts only the authority in `pem` for the servers' certificates,
    /// whose names must match the addresses connected to. Every URL must
    /// then be `rediss://`: a `redis://` one would send its password in the
    /// clear while the operator believes the link encrypted.
    pub fn with_tls_roots(mut self, pem: Vec<u8>) -> Result<Self, ConnectError> {
        if let Some(plain) = self.urls().iter().find(|url| !url.starts_with("rediss://")) {
            return Err(ConnectError::RootsWithoutTls(strip_password(plain)));
        }
        self.tls_roots = Some(pem.into());
        Ok(self)
    }

    fn urls(&self) -> &[String] {
        match &self.target {
            Target::Single(url) => std::slice::from_ref(url),
            Target::Cluster(nodes) => nodes,
        }
    }

    /// A client of one node (a master, a subscriber's node) with this
    /// endpoint's trust.
    pub fn client(&self, url: &str) -> RedisResult<redis::Client> {
        match &self.tls_roots {
            None => redis::Client::open(url),
            Some(pem) => redis::Client::build_with_tls(url, certificates(pem)),
        }
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self.target, Target::Cluster(_))
    }

    /// What a log line may show: no password.
    pub fn describe(&self) -> String {
        match &self.target {
            Target::Single(url) => strip_password(url),
            Target::Cluster(nodes) => format!("cluster {}", without_passwords(nodes)),
        }
    }

    /// A reconnecting connection whose commands time out after
    /// `response_timeout` instead of hanging. A cluster must serve all
    /// 16384 slots, or this is an error: a half-made cluster would fail
    /// some keys and not others, much later.
    pub async fn connect(&self, response_timeout: Duration) -> Result<Redis, ConnectError> {
        let connecting = async {
            match &self.target {
                Target::Single(url) => {
                    let client = self.client(url)?;
                    let config = ConnectionManagerConfig::new()
                        .set_connection_timeout(Some(Duration::from_secs(2)))
                        .set_response_timeout(Some(response_timeout))
                        .set_number_of_retries(2);
                    let conn = ConnectionManager::new_with_config(client, config).await?;
                    Ok(Redis { conn: Conn::Single(conn), endpoint: Arc::new(self.clone()), hot: None })
                }
                Target::Cluster(nodes) => {
                    // The default waits between retries on TRYAGAIN or
                    // CLUSTERDOWN start at 1.28 s and grow past a minute;
                    // a failover takes a few seconds, and a request has a
                    // deadline of its own.
                    let mut builder = ClusterClientBuilder::new(nodes.clone());
                    if let Some(pem) = &self.tls_roots {
                        builder = builder.certs(certificates(pem));
                    }
                    let client = builder
                        .connection_timeout(Duration::from_secs(2))
                        .response_timeout(response_timeout)
                        .retries(6)
                        .min_retry_wait(50)
                        .max_retry_wait(1_000)
                        .retry_wait_formula(50, 2)
                        .build()?;
                    let conn = client.get_async_connection().await?;
                    let mut conn = Redis {
                        conn: Conn::Cluster(Arc::new(Cluster::new(client, conn))),
                        endpoint: Arc::new(self.clone()),
                        hot: None,
                    };
                    let info: String = redis::cmd("CLUSTER").arg("INFO").query_async(&mut conn).await?;
                    let field = |name: &str| {
                        info.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')).map(str::trim).unwrap_or("")
                    };
                    if field("cluster_state") != "ok" || field("cluster_slots_assigned") != "16384" {
                        return Err(ConnectError::Incomplete {
                            nodes: without_passwords(nodes),
                            detail: format!(
                                "cluster_state:{} cluster_slots_assigned:{}",
                                field("cluster_state"),
                                field("cluster_slots_assigned")
                            ),
                        });
                    }
                    Ok(conn)
                }
            }
        };
        tokio::time::timeout(CONNECT_DEADLINE, connecting)
            .await
            .map_err(|_| ConnectError::Timeout(self.describe(), CONNECT_DEADLINE))?
    }

    /// Clients of the nodes a subscriber may listen through, tried in
    /// turn. Classic pub/sub reaches every node of a cluster, so any node
    /// that is up will do.
    pub fn subscribe_clients(&self) -> Vec<redis::Client> {
        self.urls().iter().filter_map(|u| self.client(u).ok()).collect()
    }
}

fn certificates(pem: &[u8]) -> redis::TlsCertificates {
    redis::TlsCertificates { client_tls: None, root_cert: Some(pem.to_vec()) }
}

fn without_passwords(urls: &[String]) -> String {
    urls.iter().map(|url| strip_password(url)).collect::<Vec<_>>().join(",")
}

fn strip_password(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => format!("{}{}", &url[..scheme + 3], &url[at + 1..]),
        _ => url.to_owned(),
    }
}

/// A connection to one Redis or to a cluster; cheap to clone (both kinds
/// are multiplexed).
#[derive(Clone)]
pub struct Redis {
    conn: Conn,
    endpoint: Arc<Endpoint>,
    /// Counts the commands' keys when set ([`Redis::count_hot_keys`]).
    hot: Option<hot::HotKeys>,
}

#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(Arc<Cluster>),
}

/// A cluster connection that is replaced when it wedges.
///
/// redis-rs 1.8's cluster connection can deadlock when a master dies under
/// load: its slot refresh waits for a lock that a node-repair future (which
/// it no longer polls) was granted, and from then on every command of every
/// slot times out, the surviving masters' too, for good. Seen with 200
/// concurrent readers and one master SIGKILLed: 0 answers per second until
/// the process restarted (`scripts/chaos` redis-master-kill, sync mode:
/// instances that never served again). So the commands' outcomes are
/// watched: when commands time out and none has succeeded for `WEDGED_AFTER`,
/// a new connection is made from the same client and takes over.
///
/// The same replacement ends a cut: a master cut off by the network
/// answers nothing (its packets are dropped, nothing is refused), and
/// redis-rs learns of the replica promoted in its place only from a
/// `MOVED`, which an unreachable master never sends. So commands to its
/// slots time out for good while the other masters answer. Timeouts that
/// go on for `TIMING_OUT_FOR` replace the connection too (at most once per
/// `TIMING_OUT_FOR`): the new one reads the slots from a node that answers,
/// and finds the promoted replica once there is one.
struct Cluster {
    client: ClusterClient,
    current: std::sync::RwLock<ClusterConnection>,
    started: std::time::Instant,
    /// Milliseconds since `started` of the last command Redis answered.
    last_answer_ms: AtomicU64,
    /// Milliseconds since `started` of the first timeout of the current
    /// run of timeouts (one with no gap of `TIMING_OUT_FOR` between two),
    /// and of the last one.
    timing_out_since_ms: AtomicU64,
    last_timeout_ms: AtomicU64,
    replacing: std::sync::atomic::AtomicBool,
}

/// No answer for this long, with commands timing out: the connection is
/// taken for wedged. Longer than a failover's few seconds of silence from
/// one master, shorter than a sale.
const WEDGED_AFTER: Duration = Duration::from_secs(3);
/// Commands timing out for this long, even with others answered: some
/// slots' master may be cut off, and the slots are read again.
const TIMING_OUT_FOR: Duration = Duration::from_secs(2);

impl Cluster {
    fn new(client: ClusterClient, conn: ClusterConnection) -> Self {
        Self {
            client,
            current: std::sync::RwLock::new(conn),
            started: std::time::Instant::now(),
            last_answer_ms: AtomicU64::new(0),
            timing_out_since_ms: AtomicU64::new(0),
            last_timeout_ms: AtomicU64::new(0),
            replacing: Default::default(),
        }
    }

    fn connection(&self) -> ClusterConnection {
        self.current.read().expect("cluster connection poisoned").clone()
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Notes an outcome; a timeout after `WEDGED_AFTER` without an answer,
    /// or after `TIMING_OUT_FOR` of timeouts, starts one replacement in the
    /// background.
    fn observe<T>(self: &Arc<Self>, outcome: &RedisResult<T>) {
        match outcome {
            Err(err) if err.is_timeout() => {
                let now = self.now_ms();
                let window = TIMING_OUT_FOR.as_millis() as u64;
                // A gap of `TIMING_OUT_FOR` since the last timeout starts a new run.
                if now.saturating_sub(self.last_timeout_ms.swap(now, Ordering::Relaxed)) >= window {
                    self.timing_out_since_ms.store(now, Ordering::Relaxed);
                }
                let silent = now.saturating_sub(self.last_answer_ms.load(Ordering::Relaxed));
                let timing_out = now.saturating_sub(self.timing_out_since_ms.load(Ordering::Relaxed));
                if (silent >= WEDGED_AFTER.as_millis() as u64 || timing_out >= window)
                    && !self.replacing.swap(true, Ordering::SeqCst)
                {
                    tokio::spawn(Arc::clone(self).replace(silent, timing_out));
                }
            }
            Err(err) if err.is_io_error() || err.is_connection_dropped() || err.is_connection_refusal() => {}
            _ => self.last_answer_ms.store(self.now_ms(), Ordering::Relaxed),
        }
    }

    async fn replace(self: Arc<Self>, silent_ms: u64, timing_out_ms: u64) {
        tracing::warn!(silent_ms, timing_out_ms, "Redis Cluster commands keep timing out; replacing the connection");
        match tokio::time::timeout(CONNECT_DEADLINE, self.client.get_async_connection()).await {
            Ok(Ok(conn)) => {
                *self.current.write().expect("cluster connection poisoned") = conn;
                // The new connection gets a window of its own.
                self.last_answer_ms.store(self.now_ms(), Ordering::Relaxed);
                self.timing_out_since_ms.store(self.now_ms(), Ordering::Relaxed);
                tracing::warn!("the Redis Cluster connection was replaced");
            }
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "replacing the Redis Cluster connection failed; will try again")
            }
            Err(_) => tracing::warn!("replacing the Redis Cluster connection timed out; will try again"),
        }
        self.replacing.store(false, Ordering::SeqCst);
    }
}

impl ConnectionLike for Redis {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        if let Some(hot) = &self.hot {
            hot.observe(cmd);
        }
        match &mut self.conn {
            Conn::Single(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(cluster) => Box::pin(async move {
                let outcome = cluster.connection().req_packed_command(cmd).await;
                cluster.observe(&outcome);
                outcome
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        if let Some(hot) = &self.hot {
            hot.observe_pipeline(pipeline);
        }
        match &mut self.conn {
            Conn::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(cluster) => Box::pin(async move {
                let outcome = cluster.connection().req_packed_commands(pipeline, offset, count).await;
                cluster.observe(&outcome);
                outcome
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match &self.conn {
            Conn::Single(conn) => conn.get_db(),
            Conn::Cluster(cluster) => cluster.connection().get_db(),
        }
    }
}

impl Redis {
    pub fn is_cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// From now on this connection and its clones count their commands'
    /// keys in `hot`; clones made before do not.
    pub fn count_hot_keys(&mut self, hot: hot::HotKeys) {
        self.hot = Some(hot);
    }

    /// `other` (a connection of its own, for blocking reads or waits)
    /// counts its commands where this one does: a master's share is of all
    /// the commands this process sends it.
    pub fn count_like(&self, other: &mut Redis) {
        other.hot.clone_from(&self.hot);
    }

    /// The masters' URLs: the nodes a `SCAN` or an `INFO` must visit to see
    /// everything. One server is its own master.
    pub async fn masters(&mut self) -> RedisResult<Vec<String>> {
        match &self.conn {
            Conn::Cluster(_) => {
                let prefix = url_prefix(self.endpoint.urls());
                let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(self).await?;
                Ok(cluster_masters(&nodes, &prefix))
            }
            Conn::Single(_) => Ok(self.endpoint.urls().to_vec()),
        }
    }

    /// Every key matching `pattern` on every master.
    pub async fn scan_match(&mut self, pattern: &str) -> RedisResult<Vec<String>> {
        let mut found = Vec::new();
        for master in self.masters().await? {
            let mut conn = self.endpoint.client(&master)?.get_multiplexed_async_connection().await?;
            let mut cursor = 0u64;
            loop {
                let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(1_000)
                    .query_async(&mut conn)
                    .await?;
                found.extend(keys);
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(found)
    }

    /// Sends a command that names no key (`WAIT`, say) to the master of
    /// `key`'s slot: on a cluster, the node and connection that `key`'s
    /// commands went to; on one server, its connection.
    pub async fn query_on_master_of<T: FromRedisValue>(&mut self, key: &str, cmd: Cmd) -> RedisResult<T> {
        match &mut self.conn {
            Conn::Single(conn) => cmd.query_async(conn).await,
            Conn::Cluster(cluster) => {
                let route = Route::with_key(key, SlotAddr::Master);
                let outcome = cluster
                    .connection()
                    .route_command(cmd, RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)))
                    .await;
                cluster.observe(&outcome);
                redis::from_redis_value(outcome?).map_err(RedisError::from)
            }
        }
    }

    /// The oldest `redis_version` among the masters, as (major, minor).
    pub async fn oldest_version(&mut self) -> RedisResult<(u32, u32)> {
        let mut oldest = (u32::MAX, u32::MAX);
        for master in self.masters().await? {
            let mut conn = self.endpoint.client(&master)?.get_multiplexed_async_connection().await?;
            let info: String = redis::cmd("INFO").arg("server").query_async(&mut conn).await?;
            let version = redis_version(&info).ok_or_else(|| {
                RedisError::from((redis::ErrorKind::UnexpectedReturnType, "INFO server has no redis_version"))
            })?;
            oldest = oldest.min(version);
        }
        Ok(oldest)
    }

    /// The fewest replicas any master has now: what a `WAIT` for that many
    /// can expect to get.
    pub async fn fewest_replicas(&mut self) -> RedisResult<u32> {
        let mut fewest = u32::MAX;
        for master in self.masters().await? {
            let mut conn = self.endpoint.client(&master)?.get_multiplexed_async_connection().await?;
            let info: String = redis::cmd("INFO").arg("replication").query_async(&mut conn).await?;
            let replicas = info
                .lines()
                .find_map(|l| l.strip_prefix("connected_slaves:"))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0);
            fewest = fewest.min(replicas);
        }
        Ok(if fewest == u32::MAX { 0 } else { fewest })
    }
}

/// `redis_version:7.0.15` in an `INFO server` reply, as (7, 0).
fn redis_version(info: &str) -> Option<(u32, u32)> {
    let version = info.lines().find_map(|l| l.strip_prefix("redis_version:"))?.trim();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??))
}

/// The scheme and credentials of the configured nodes (`redis://` or
/// `redis://user:password@`): `CLUSTER NODES` names a master by its address
/// alone, and a cluster whose users need a password would refuse a
/// connection to it made without one.
fn url_prefix(configured: &[String]) -> String {
    let Some(first) = configured.first() else { return "redis://".to_owned() };
    match (first.find("://"), first.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => first[..=at].to_owned(),
        (Some(scheme), _) => first[..scheme + 3].to_owned(),
        _ => "redis://".to_owned(),
    }
}

/// `CLUSTER NODES` lines: `<id> <ip:port@bus[,hostname]> <flags> ...`;
/// the masters that are not failed, as `<prefix>ip:port`.
fn cluster_masters(nodes: &str, prefix: &str) -> Vec<String> {
    nodes
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_id, addr, flags) = (fields.next()?, fields.next()?, fields.next()?);
            let flags: Vec<&str> = flags.split(',').collect();
            if !flags.contains(&"master") || flags.iter().any(|f| f.starts_with("fail") || *f == "noaddr") {
                return None;
            }
            let host_port = addr.split(['@', ',']).next()?;
            Some(format!("{prefix}{host_port}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_nodes_win_over_the_url_and_get_a_scheme() {
        let endpoint =
            Endpoint::new("redis://127.0.0.1:6379", Some(" 127.0.0.1:7001, redis://127.0.0.1:7002 ")).unwrap();
        assert_eq!(endpoint.urls(), ["redis://127.0.0.1:7001", "redis://127.0.0.1:7002"]);
        assert!(endpoint.is_cluster());
        let single = Endpoint::new("redis://h:1", Some("  ")).unwrap();
        assert_eq!((single.urls(), single.is_cluster()), (&["redis://h:1".to_owned()][..], false));
        assert!(Endpoint::new("redis://h:1", Some("not a url::")).is_err());
    }

    #[test]
    fn a_described_endpoint_shows_no_password() {
        let endpoint = Endpoint::new("redis://:secret@127.0.0.1:6379", None).unwrap();
        assert_eq!(endpoint.describe(), "redis://127.0.0.1:6379");
        let cluster = Endpoint::new("", Some("rediss://hmdp:secret@10.0.0.31:6379")).unwrap();
        assert!(!format!("{cluster:?}").contains("secret"), "{cluster:?}");
    }

    #[test]
    fn an_authority_for_a_url_without_tls_is_refused() {
        let pem = b"-----BEGIN CERTIFICATE-----".to_vec();
        let plain = Endpoint::new("", Some("rediss://10.0.0.31:6379,redis://:secret@10.0.0.32:6379")).unwrap();
        let refused = plain.with_tls_roots(pem.clone()).unwrap_err().to_string();
        assert!(refused.contains("redis://10.0.0.32:6379") && !refused.contains("secret"), "{refused}");
        assert!(Endpoint::new("rediss://10.0.0.30:6379", None).unwrap().with_tls_roots(pem).is_ok());
    }

    #[test]
    fn the_version_is_read_from_info_server() {
        assert_eq!(redis_version("# Server\r\nredis_version:7.0.15\r\nredis_mode:cluster\r\n"), Some((7, 0)));
        assert_eq!(redis_version("redis_version:6.2.14\n"), Some((6, 2)));
        assert_eq!(redis_version("redis_mode:standalone\n"), None);
    }

    #[test]
    fn only_live_masters_are_scanned() {
        let nodes = "\
a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
a2 127.0.0.1:7002@17002 master - 0 0 2 connected 5461-10922
a3 127.0.0.1:7003@17003 master,fail - 0 0 3 connected
a4 127.0.0.1:7004@17004,host slave a1 0 0 1 connected
a5 127.0.0.1:7005@17005 master - 0 0 7 connected 10923-16383
";
        assert_eq!(
            cluster_masters(nodes, "redis://"),
            vec!["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7005"]
        );
    }

    #[test]
    fn a_master_is_reached_with_the_configured_nodes_scheme_and_credentials() {
        let nodes = "a1 10.0.0.31:6379@16379 myself,master - 0 0 1 connected 0-16383\n";
        let configured = ["redis://hmdp:s3cret@10.0.0.32:6379".to_owned(), "redis://10.0.0.33:6379".to_owned()];
        assert_eq!(cluster_masters(nodes, &url_prefix(&configured)), vec!["redis://hmdp:s3cret@10.0.0.31:6379"]);
        assert_eq!(url_prefix(&["127.0.0.1:7001".to_owned()]), "redis://");
        assert_eq!(url_prefix(&["rediss://10.0.0.1:6379".to_owned()]), "rediss://");
        assert_eq!(url_prefix(&[]), "redis://");
    }
}
