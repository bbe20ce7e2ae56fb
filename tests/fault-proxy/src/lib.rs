//! A TCP proxy a test can cut (and restore), to make a client lose Redis or
//! MariaDB the way a crashed or partitioned instance would, while the
//! test's own client keeps it. It can also cut one connection right after
//! forwarding a given request (`cut_after`): the server gets the request
//! whole, the client never hears the answer. And it can count the requests
//! that carry a pattern (`count`), to see what a client really sent. And
//! it can go silent (`silence`): a cut that drops packets and resets
//! nothing, as a dropping firewall makes one.
//!
//! A package of its own, with nothing of the service in it, so that the
//! libraries' tests (the lock's) and the service's harness share it.

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
};

/// The suites' Redis: REDIS_URL, or the local default.
pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// The MariaDB server of DATABASE_URL (or the local default), without the
/// database.
pub fn database_server_url() -> String {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/hmdp".into());
    let (scheme, rest) = url.split_once("://").expect("DATABASE_URL has a scheme");
    let server = rest.split('/').next().unwrap_or(rest);
    format!("{scheme}://{server}")
}

/// A request pattern, and how long traffic stalls once a client sends it.
type StallTrigger = Arc<Mutex<Option<(Vec<u8>, std::time::Duration)>>>;

/// A pattern, and how many times clients have sent it since it was set.
#[derive(Clone, Default)]
struct Counter {
    pattern: Arc<Mutex<Option<Vec<u8>>>>,
    hits: Arc<AtomicUsize>,
}

impl Counter {
    fn see(&self, bytes: &[u8]) {
        let pattern = self.pattern.lock().unwrap();
        let Some(pattern) = pattern.as_ref() else { return };
        let n = bytes.windows(pattern.len()).filter(|w| *w == pattern.as_slice()).count();
        self.hits.fetch_add(n, Ordering::SeqCst);
    }
}

pub struct Proxy {
    addr: SocketAddr,
    /// True while traffic passes.
    up: watch::Sender<bool>,
    /// The next connection to send this is cut once it has been forwarded.
    cut_after: Arc<Mutex<Option<Vec<u8>>>>,
    fired: Arc<AtomicBool>,
    /// The next request with this pattern stalls traffic for that long.
    stall_on: StallTrigger,
    /// Set once a `stall_on` pattern was seen and traffic stalled.
    stall_fired: Arc<AtomicBool>,
    counter: Counter,
    silence: Silence,
    /// The URL it stands in for, to be pointed at the proxy.
    url: url::Url,
}

/// A silent cut: connections stay open and what either side sends is
/// lost. Those it caught stay silent after it heals, as a connection
/// whose retransmissions have backed off past the cut does for a while
/// (a 30 s drop leaves the next retry some 20 s after the heal); a
/// connection made after the heal passes.
#[derive(Clone, Default)]
struct Silence {
    /// Counts the cuts begun; a connection made before the latest, or
    /// during one, is silent for good.
    cuts: Arc<AtomicUsize>,
    on: Arc<AtomicBool>,
}

impl Silence {
    /// The cut a connection made now belongs to, `None` if it is made
    /// during one (it never passes anything).
    fn joined(&self) -> Option<usize> {
        let cuts = self.cuts.load(Ordering::SeqCst);
        (!self.on.load(Ordering::SeqCst)).then_some(cuts)
    }

    fn passes(&self, joined: Option<usize>) -> bool {
        joined == Some(self.cuts.load(Ordering::SeqCst))
    }
}

impl Proxy {
    /// A proxy in front of the Redis that REDIS_URL names.
    pub async fn to_redis() -> Self {
        Self::to_url(&redis_url(), 6379).await
    }

    /// A proxy in front of the MariaDB server of DATABASE_URL.
    pub async fn to_database() -> Self {
        Self::to_url(&database_server_url(), 3306).await
    }

    /// A proxy in front of the server `url` names (`default_port` when it
    /// names none): a NATS server, say.
    pub async fn to_url(url: &str, default_port: u16) -> Self {
        let url = url::Url::parse(url).expect("a URL");
        let host = url.host_str().expect("the URL names a host").to_owned();
        let port = url.port().unwrap_or(default_port);
        let target = tokio::net::lookup_host((host.as_str(), port)).await.unwrap().next().expect("an address");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (up, _) = watch::channel(true);
        let state = up.subscribe();
        let cut_after: Arc<Mutex<Option<Vec<u8>>>> = Arc::default();
        let fired = Arc::new(AtomicBool::new(false));
        let (armed, fired_flag) = (cut_after.clone(), fired.clone());
        let (stalled, _) = watch::channel(false);
        let stall_on: StallTrigger = Arc::default();
        let stall_fired = Arc::new(AtomicBool::new(false));
        let (stall_tx, stall_trigger, stall_flag) = (stalled.clone(), stall_on.clone(), stall_fired.clone());
        let counter = Counter::default();
        let counting = counter.clone();
        let silence = Silence::default();
        let silencing = silence.clone();
        tokio::spawn(async move {
            loop {
                let Ok((inbound, _)) = listener.accept().await else { return };
                let mut state = state.clone();
                if !*state.borrow_and_update() {
                    continue; // cut: the connection is dropped at once
                }
                let stall = Stall {
                    state: stall_tx.subscribe(),
                    sender: stall_tx.clone(),
                    on: stall_trigger.clone(),
                    fired: stall_flag.clone(),
                };
                let (armed, fired, counting) = (armed.clone(), fired_flag.clone(), counting.clone());
                let silence = (silencing.clone(), silencing.joined());
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(target).await else { return };
                    tokio::select! {
                        _ = state.wait_for(|up| !up) => {}
                        () = pipe(inbound, outbound, armed, fired, stall, counting, silence) => {}
                    }
                });
            }
        });
        Self { addr, up, cut_after, fired, stall_on, stall_fired, counter, silence, url }
    }

    /// The URL through this proxy, credentials and path as in the original.
    pub fn url(&self) -> String {
        let mut url = self.url.clone();
        url.set_ip_host(self.addr.ip()).unwrap();
        url.set_port(Some(self.addr.port())).unwrap();
        url.to_string().trim_end_matches('/').to_owned()
    }

    pub fn redis_url(&self) -> String {
        self.url()
    }

    /// Drops every connection and every new one until `restore`.
    pub fn cut(&self) {
        self.up.send_replace(false);
    }

    /// Lets traffic through again (clients reconnect by themselves).
    pub fn restore(&self) {
        self.up.send_replace(true);
    }

    /// A silent cut begins: every connection, open or new, stays open and
    /// loses what either side sends.
    pub fn silence(&self) {
        self.silence.on.store(true, Ordering::SeqCst);
        self.silence.cuts.fetch_add(1, Ordering::SeqCst);
    }

    /// The silent cut heals: new connections pass; those it caught stay
    /// silent.
    pub fn unsilence(&self) {
        self.silence.on.store(false, Ordering::SeqCst);
    }

    /// The next connection whose client sends `pattern` is closed right
    /// after those bytes were passed on.
    pub fn cut_after(&self, pattern: &[u8]) {
        *self.cut_after.lock().unwrap() = Some(pattern.to_vec());
    }

    /// From the next request that carries `pattern` on, holds back what
    /// clients send for `for_how_long`, then passes it on: a paused or
    /// overloaded server as its clients see it.
    pub fn stall_on(&self, pattern: &[u8], for_how_long: std::time::Duration) {
        *self.stall_on.lock().unwrap() = Some((pattern.to_vec(), for_how_long));
    }

    /// From now on, counts the occurrences of `pattern` in what clients
    /// send (from zero).
    pub fn count(&self, pattern: &[u8]) {
        *self.counter.pattern.lock().unwrap() = Some(pattern.to_vec());
        self.counter.hits.store(0, Ordering::SeqCst);
    }

    /// How many times clients sent the pattern given to `count`.
    pub fn counted(&self) -> usize {
        self.counter.hits.load(Ordering::SeqCst)
    }

    /// Whether a `stall_on` pattern was seen and traffic stalled.
    pub fn stall_fired(&self) -> bool {
        self.stall_fired.load(Ordering::SeqCst)
    }

    /// Whether `cut_after` has fired.
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

async fn pipe(
    inbound: TcpStream,
    outbound: TcpStream,
    armed: Arc<Mutex<Option<Vec<u8>>>>,
    fired: Arc<AtomicBool>,
    mut stall: Stall,
    counter: Counter,
    (silence, joined): (Silence, Option<usize>),
) {
    let (mut client_read, mut client_write) = inbound.into_split();
    let (mut server_read, mut server_write) = outbound.into_split();
    // Set before the matching bytes go out: from then on the client hears
    // nothing from the server.
    let silenced = AtomicBool::new(false);
    let upstream = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if !silence.passes(joined) {
                continue;
            }
            let hit = {
                let mut armed = armed.lock().unwrap();
                let hit = armed.as_ref().is_some_and(|p| buf[..n].windows(p.len()).any(|w| w == p.as_slice()));
                if hit {
                    *armed = None;
                    silenced.store(true, Ordering::SeqCst);
                }
                hit
            };
            stall.trigger_on(&buf[..n]);
            counter.see(&buf[..n]);
            if stall.state.wait_for(|stalled| !stalled).await.is_err() {
                return;
            }
            if server_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
            if hit {
                // Let the server read and act on it, then the client loses
                // the connection without an answer.
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                fired.store(true, Ordering::SeqCst);
                return;
            }
        }
    };
    let downstream = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match server_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if silenced.load(Ordering::SeqCst) || !silence.passes(joined) {
                continue;
            }
            if client_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        () = upstream => {}
        () = downstream => {}
    }
}

/// One connection's view of the proxy's stall.
struct Stall {
    state: watch::Receiver<bool>,
    sender: watch::Sender<bool>,
    on: StallTrigger,
    fired: Arc<AtomicBool>,
}

impl Stall {
    fn trigger_on(&self, bytes: &[u8]) {
        let mut on = self.on.lock().unwrap();
        let Some((pattern, how_long)) = on.as_ref() else { return };
        if !bytes.windows(pattern.len()).any(|w| w == pattern.as_slice()) {
            return;
        }
        let how_long = *how_long;
        *on = None;
        self.fired.store(true, Ordering::SeqCst);
        self.sender.send_replace(true);
        let sender = self.sender.clone();
        tokio::spawn(async move {
            tokio::time::sleep(how_long).await;
            sender.send_replace(false);
        });
    }
}
