//! A Redis Cluster of a test's own: six nodes on free ports, three masters
//! with a replica each, whose masters a test may SIGKILL (the shared local
//! cluster of `scripts/check-stack` serves other tests at the same time).

use std::{
    net::TcpListener,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// Six nodes, three masters with a replica each, on free ports, stopped
/// when dropped.
pub struct LocalCluster {
    pub ports: Vec<u16>,
    children: Vec<Option<Child>>,
    dir: PathBuf,
}

impl LocalCluster {
    pub fn start() -> Option<Self> {
        let installed = |bin: &str| Command::new(bin).arg("--version").output().is_ok_and(|o| o.status.success());
        if !installed("redis-server") || !installed("redis-cli") {
            return None;
        }
        let dir = std::env::temp_dir().join(format!("hmdp-cluster-{}-{}", std::process::id(), uuid::Uuid::new_v4()));
        let _ = std::fs::remove_dir_all(&dir);
        let ports = free_ports(6);
        let mut cluster = Self { children: ports.iter().map(|_| None).collect(), ports, dir };
        for i in 0..cluster.ports.len() {
            cluster.spawn(i);
        }
        let addrs: Vec<String> = cluster.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        wait_until("every node answers", || cluster.ports.iter().all(|&p| cli(p, &["PING"]) == "PONG"));
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .unwrap();
        assert!(created.status.success(), "cluster create: {}", String::from_utf8_lossy(&created.stdout));
        wait_until("the cluster is ok with every replica in sync", || cluster.healthy());
        Some(cluster)
    }

    fn spawn(&mut self, i: usize) {
        let port = self.ports[i];
        let dir = self.dir.join(port.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--cluster-enabled", "yes"])
            .args(["--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"])
            .args(["--appendonly", "no", "--save", "", "--dir"])
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.children[i] = Some(child);
    }

    /// `REDIS_CLUSTER_NODES` for it.
    pub fn nodes(&self) -> String {
        self.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect::<Vec<_>>().join(",")
    }

    /// What `redis-cli -p PORT ARGS...` prints.
    pub fn cli(&self, port: u16, args: &[&str]) -> String {
        cli(port, args)
    }

    /// Waits until the replica of master `port` has everything the master
    /// wrote: a write of `key` (one of the master's slots) and a `WAIT` on
    /// the same connection, which a replica acknowledges in order.
    pub fn replicated(&self, port: u16, key: &str) {
        use std::io::Write;
        let mut child = Command::new("redis-cli")
            .args(["-p", &port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        write!(child.stdin.take().unwrap(), "SET {key} 1\nWAIT 1 5000\n").unwrap();
        let out = child.wait_with_output().unwrap();
        let out = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.lines().collect::<Vec<_>>(), ["OK", "1"], "master {port}'s replica did not catch up");
    }

    fn index(&self, port: u16) -> usize {
        self.ports.iter().position(|&p| p == port).unwrap()
    }

    pub fn kill(&mut self, port: u16) {
        let i = self.index(port);
        if let Some(mut child) = self.children[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The master that serves `tag` (as a node that is up sees it) and the
    /// tag's slot.
    pub fn master_of(&self, tag: &str) -> (u16, u16) {
        let slot: u16 = cli(self.live_port(), &["CLUSTER", "KEYSLOT", tag]).parse().unwrap();
        (self.owner(slot).expect("the slot has no master"), slot)
    }

    pub fn wait_for_new_owner(&self, slot: u16, dead: u16) -> u16 {
        let mut owner = None;
        wait_until("a replica takes the dead master's slots", || {
            owner =
                self.owner(slot).filter(|&p| p != dead && cli(p, &["CLUSTER", "INFO"]).contains("cluster_state:ok"));
            owner.is_some()
        });
        owner.unwrap()
    }

    pub fn owner(&self, slot: u16) -> Option<u16> {
        let nodes = cli(self.live_port(), &["CLUSTER", "NODES"]);
        nodes.lines().find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let serves = fields.get(2)?.contains("master") && !fields[2].contains("fail");
            let owns = fields.iter().skip(8).any(|range| match range.split_once('-') {
                Some((a, b)) => a.parse::<u16>().is_ok_and(|a| a <= slot) && b.parse::<u16>().is_ok_and(|b| slot <= b),
                None => range.parse::<u16>() == Ok(slot),
            });
            (serves && owns).then(|| fields[1].split(['@', ':']).nth(1)?.parse().ok()).flatten()
        })
    }

    fn live_port(&self) -> u16 {
        let i = self.children.iter().position(Option::is_some).unwrap();
        self.ports[i]
    }

    pub fn healthy(&self) -> bool {
        self.ports.iter().all(|&p| {
            let info = cli(p, &["CLUSTER", "INFO"]);
            info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:6")
        }) && self.ports.iter().all(|&p| {
            let replication = cli(p, &["INFO", "replication"]);
            !replication.contains("role:master") || replication.contains("state=online")
        })
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli").args(["-p", &port.to_string()]).args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ok() {
        assert!(Instant::now() < deadline, "not within 60 s: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Ports whose cluster bus port (+10000) is free too.
fn free_ports(n: usize) -> Vec<u16> {
    let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
    let base = 20_000 + (std::process::id() % 2_000) as u16 * 10;
    (base..base + 2_000).filter(|&p| free(p) && free(p + 10_000)).take(n).collect()
}
