//! A NATS server with JetStream of a test's own: its own port and store,
//! stopped (and its store deleted) when dropped, restartable on the same
//! port and store to play a broker that went away and came back; or one
//! that asks for a password and speaks TLS only, with a certificate of a
//! CA of the test's own (made with `openssl`).

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
    secured: Option<Secured>,
    member: Option<Member>,
}

/// A server's place in a cluster of the test's own.
struct Member {
    name: String,
    route_port: u16,
    /// The other members' route ports.
    routes: Vec<u16>,
}

/// What a secured server asks for, and where its CA is.
pub struct Secured {
    pub user: String,
    pub password: String,
    /// The CA that signed the server's certificate (PEM).
    pub ca_file: PathBuf,
    /// Another CA, which signed nothing the server holds (PEM).
    pub other_ca_file: PathBuf,
    dir: PathBuf,
}

/// NATS_SERVER (scripts/test names the 2.15 server it installs), else
/// Debian's in /usr/sbin (which a user's PATH may lack), else the PATH's.
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
        Self::started(None)
    }

    /// A server that lets in only `user` with its password, over TLS.
    pub fn start_secured() -> Self {
        let tag = uuid::Uuid::new_v4().simple().to_string();
        let dir = std::env::temp_dir().join(format!("hmdp-test-nats-tls-{}", &tag[..12]));
        std::fs::create_dir_all(&dir).unwrap();
        make_certificates(&dir);
        Self::started(Some(Secured {
            user: "hmdp-relay".into(),
            password: tag[12..].into(),
            ca_file: dir.join("ca.pem"),
            other_ca_file: dir.join("other-ca.pem"),
            dir,
        }))
    }

    fn started(secured: Option<Secured>) -> Self {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let tag = uuid::Uuid::new_v4().simple().to_string();
        let store = std::env::temp_dir().join(format!("hmdp-test-nats-{}", &tag[..12]));
        let mut server = Self { port, store, child: None, secured, member: None };
        server.restart();
        server
    }

    /// Three servers with JetStream clustered over routes of their own,
    /// each with its own store, named `name()`: a cluster whose members a
    /// test may kill. Returns once the cluster has a JetStream leader.
    pub async fn cluster_of_three() -> Vec<Self> {
        let free = || TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let (ports, route_ports): (Vec<u16>, Vec<u16>) = (0..3).map(|_| (free(), free())).unzip();
        let tag = uuid::Uuid::new_v4().simple().to_string();
        let servers: Vec<Self> = (0..3)
            .map(|i| {
                let member = Member {
                    name: format!("n{i}-{}", &tag[..8]),
                    route_port: route_ports[i],
                    routes: route_ports.iter().copied().filter(|&p| p != route_ports[i]).collect(),
                };
                let store = std::env::temp_dir().join(format!("hmdp-test-nats-{}-{i}", &tag[..12]));
                let mut server = Self { port: ports[i], store, child: None, secured: None, member: Some(member) };
                server.restart();
                server
            })
            .collect();
        // JetStream's API answers with an error until a leader is elected.
        let client = async_nats::connect(servers[0].url()).await.unwrap();
        let started = Instant::now();
        loop {
            let answer = client.request("$JS.API.INFO", "".into()).await;
            let info: Option<serde_json::Value> = answer.ok().and_then(|m| serde_json::from_slice(&m.payload).ok());
            if info.as_ref().is_some_and(|i| i.get("error").is_none()) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the NATS cluster elected no JetStream leader: {info:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        servers
    }

    /// A cluster member's server name (what a stream's leader is named by).
    pub fn name(&self) -> Option<&str> {
        self.member.as_ref().map(|m| m.name.as_str())
    }

    /// The server's URL; a secured one's names the scheme `tls` and carries
    /// the credentials, as `NATS_URL` would.
    pub fn url(&self) -> String {
        match &self.secured {
            None => format!("nats://127.0.0.1:{}", self.port),
            Some(s) => format!("tls://{}:{}@127.0.0.1:{}", s.user, s.password, self.port),
        }
    }

    /// What a server started with `start_secured` asks for; `None` for
    /// one that asks for nothing.
    pub fn secured(&self) -> Option<&Secured> {
        self.secured.as_ref()
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
        let mut command = Command::new(binary());
        command.args(["-js", "-a", "127.0.0.1", "-p", &self.port.to_string(), "-sd"]).arg(&self.store);
        if let Some(m) = &self.member {
            let routes: Vec<String> = m.routes.iter().map(|p| format!("nats://127.0.0.1:{p}")).collect();
            command.args(["--server_name", &m.name, "--cluster_name", "hmdp-test"]);
            command.args(["--cluster", &format!("nats://127.0.0.1:{}", m.route_port), "--routes", &routes.join(",")]);
        }
        if let Some(s) = &self.secured {
            command.args(["--user", &s.user, "--pass", &s.password, "--tls", "--tlscert"]);
            command.arg(s.dir.join("server.pem")).arg("--tlskey").arg(s.dir.join("server.key"));
        }
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server runs (NATS_SERVER: scripts/test names the 2.15 server it installs)");
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
        if let Some(s) = &self.secured {
            let _ = std::fs::remove_dir_all(&s.dir);
        }
    }
}

/// Two CAs, and a certificate for 127.0.0.1 the first signed: what rustls
/// asks of a server's (a leaf that is no CA, its address in the SAN).
fn make_certificates(dir: &std::path::Path) {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl").current_dir(dir).args(args).output().expect("openssl runs");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    for ca in ["ca", "other-ca"] {
        let (key, pem, subject) = (format!("{ca}.key"), format!("{ca}.pem"), format!("/CN=hmdp test {ca}"));
        openssl(
            &[&["req", "-x509"][..], &ec, &["-days", "2", "-subj", &subject, "-keyout", &key, "-out", &pem]].concat(),
        );
    }
    std::fs::write(
        dir.join("server.ext"),
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n",
    )
    .unwrap();
    openssl(&[&["req"][..], &ec, &["-subj", "/CN=127.0.0.1", "-keyout", "server.key", "-out", "server.csr"]].concat());
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "server.ext",
        "-out",
        "server.pem",
    ]);
}
