//! A NATS server with JetStream of a test's own: its own port and store,
//! stopped (and its store deleted) when dropped, restartable on the same
//! port and store to play a broker that went away and came back.

use std::{
    net::TcpListener,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

pub struct NatsServer {
    pub port: u16,
    store: PathBuf,
    child: Option<Child>,
}

/// Debian's server is in /usr/sbin, which a user's PATH may lack.
fn binary() -> String {
    std::env::var("NATS_SERVER").unwrap_or_else(|_| {
        if std::path::Path::new("/usr/sbin/nats-server").exists() {
            "/usr/sbin/nats-server".into()
        } else {
            "nats-server".into()
        }
    })
}

impl NatsServer {
    pub fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let tag = uuid::Uuid::new_v4().simple().to_string();
        let store = std::env::temp_dir().join(format!("hmdp-test-nats-{}", &tag[..12]));
        let mut server = Self { port, store, child: None };
        server.restart();
        server
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kills the server (SIGKILL: a broker that dies, not one that stops).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills it and deletes its store: started again, it has no stream.
    pub fn kill_and_wipe(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.store);
    }

    /// Starts it (again) on its port and store, and waits until it listens.
    pub fn restart(&mut self) {
        self.kill();
        let child = Command::new(binary())
            .args(["-js", "-a", "127.0.0.1", "-p", &self.port.to_string(), "-sd"])
            .arg(&self.store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server runs (Debian's nats-server package; scripts/test installs it)");
        self.child = Some(child);
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(started.elapsed() < Duration::from_secs(10), "nats-server never listened on {}", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.store);
    }
}
