//! Redis servers of a test's own, for what the shared Redis cannot show: a
//! failover, with a master whose last writes never reach its replica. Each
//! runs on a port of its own (17000-17999) without persistence, and is
//! stopped, its directory removed, when dropped: a failing test too.

use std::{
    net::TcpListener,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// How long a server gets to start, and a replica to catch up.
const PATIENCE: Duration = Duration::from_secs(10);

pub struct RedisServer {
    port: u16,
    child: Child,
    dir: PathBuf,
}

impl RedisServer {
    /// A fresh empty master; `None`, said on stderr, when `redis-server` is
    /// not installed (CI has it: the test is then skipped, not passed
    /// silently).
    pub async fn start(test: &str) -> Option<Self> {
        if Command::new("redis-server").arg("--version").output().is_err() {
            eprintln!("{test}: SKIPPED, redis-server is not installed (it starts servers of its own)");
            return None;
        }
        for _ in 0..20 {
            let port = free_port();
            let dir = std::env::temp_dir().join(format!("hmdp-redis-{port}-{}", uuid::Uuid::new_v4().simple()));
            std::fs::create_dir_all(&dir).expect("a directory for the test's Redis");
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                // A replica is fed at once, not after the default 5 s wait
                // for others to share the transfer.
                .args(["--repl-diskless-sync-delay", "0"])
                .arg("--dir")
                .arg(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("starting redis-server");
            let mut server = Self { port, child, dir };
            if server.answers().await {
                return Some(server);
            }
            // The port was taken between the look and the start: another.
        }
        panic!("no Redis server of the test's own could be started");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// A plain connection, for the test's own commands; its answers may
    /// take as long as a `WAIT` of `PATIENCE` (redis-rs gives up after
    /// 500 ms by default, which a loaded box's replica can miss).
    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(PATIENCE * 2));
        redis::Client::open(self.url()).unwrap().get_multiplexed_async_connection_with_config(&config).await.unwrap()
    }

    /// Up and answering, as this very process: a server that could not
    /// take the port exits, and another's there must not be mistaken for it.
    async fn answers(&mut self) -> bool {
        let until = Instant::now() + PATIENCE;
        while Instant::now() < until {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return false;
            }
            if let Ok(client) = redis::Client::open(self.url())
                && let Ok(mut conn) = client.get_multiplexed_async_connection().await
                && let Ok(info) = redis::cmd("INFO").arg("server").query_async::<String>(&mut conn).await
            {
                let pid = info.lines().find_map(|l| l.strip_prefix("process_id:")).map(str::trim);
                return pid == Some(self.child.id().to_string().as_str());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// A fresh master and a replica of it, synchronised; `None` as `start`.
    pub async fn master_with_replica(test: &str) -> Option<(Self, Self)> {
        let master = Self::start(test).await?;
        let replica = Self::start(test).await?;
        replica.replicate(&master).await;
        Some((master, replica))
    }

    /// Makes this server a replica of `master` and waits until it holds
    /// everything the master has.
    pub async fn replicate(&self, master: &RedisServer) {
        let mut conn = self.connection().await;
        redis::cmd("REPLICAOF").arg("127.0.0.1").arg(master.port).query_async::<()>(&mut conn).await.unwrap();
        let until = Instant::now() + PATIENCE;
        while replication_field(&mut conn, "master_link_status").await.as_deref() != Some("up") {
            assert!(Instant::now() < until, "the replica on {} never synchronised", self.port);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        master.caught_up().await;
    }

    /// Waits until every replica acknowledged every write so far.
    pub async fn caught_up(&self) {
        let mut conn = self.connection().await;
        let replicas: u32 =
            replication_field(&mut conn, "connected_slaves").await.and_then(|n| n.parse().ok()).unwrap_or(0);
        let acked: u32 =
            redis::cmd("WAIT").arg(replicas).arg(PATIENCE.as_millis() as u64).query_async(&mut conn).await.unwrap();
        assert_eq!(acked, replicas, "the replicas of {} did not catch up", self.port);
    }

    /// A replica promoted: it stops following its master (whose later
    /// writes it never sees) and takes writes itself, under a replication
    /// id of its own, as a promoted replica does in a failover.
    pub async fn promote(&self) {
        let mut conn = self.connection().await;
        redis::cmd("REPLICAOF").arg("NO").arg("ONE").query_async::<()>(&mut conn).await.unwrap();
    }

    /// The server stopped (SIGSTOP) until the guard is dropped: its
    /// connections stay open and answer nothing, as across a cut that drops
    /// packets; a master still holds such a replica online.
    pub fn frozen(&self) -> Frozen {
        signal(self.child.id(), "-STOP");
        Frozen { pid: self.child.id() }
    }

    /// Its `master_replid` (the replication history it serves).
    pub async fn replid(&self) -> String {
        replication_field(&mut self.connection().await, "master_replid").await.unwrap_or_default()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A server stopped by `RedisServer::frozen`, let go when dropped.
pub struct Frozen {
    pid: u32,
}

impl Drop for Frozen {
    fn drop(&mut self) {
        signal(self.pid, "-CONT");
    }
}

fn signal(pid: u32, signal: &str) {
    let sent = Command::new("kill").arg(signal).arg(pid.to_string()).status();
    assert!(sent.is_ok_and(|s| s.success()), "kill {signal} {pid} failed");
}

async fn replication_field(conn: &mut redis::aio::MultiplexedConnection, field: &str) -> Option<String> {
    let info: String = redis::cmd("INFO").arg("replication").query_async(conn).await.ok()?;
    info.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':')).map(|v| v.trim().to_owned())
}

/// A port in 17000-17999 that nothing listens on now.
fn free_port() -> u16 {
    loop {
        let port = 17_000 + (uuid::Uuid::new_v4().as_u128() % 1_000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}
