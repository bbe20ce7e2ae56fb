//! A TCP proxy a test can cut (and restore), to make a client lose Redis
//! the way a crashed or partitioned instance would, while the test's own
//! client keeps it.

use std::net::SocketAddr;

use tokio::{
    net::{TcpListener, TcpStream},
    sync::watch,
};

pub struct Proxy {
    addr: SocketAddr,
    /// True while traffic passes.
    up: watch::Sender<bool>,
    /// REDIS_URL, to be pointed at the proxy with everything else kept.
    redis_url: reqwest::Url,
}

impl Proxy {
    /// A proxy in front of the Redis that REDIS_URL names.
    pub async fn to_redis() -> Self {
        let url = reqwest::Url::parse(&super::redis_url()).expect("REDIS_URL is a URL");
        let host = url.host_str().expect("REDIS_URL names a host").to_owned();
        let port = url.port().unwrap_or(6379);
        let target = tokio::net::lookup_host((host.as_str(), port)).await.unwrap().next().expect("Redis address");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (up, _) = watch::channel(true);
        let state = up.subscribe();
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else { return };
                let mut state = state.clone();
                if !*state.borrow_and_update() {
                    continue; // cut: the connection is dropped at once
                }
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(target).await else { return };
                    tokio::select! {
                        _ = state.wait_for(|up| !up) => {}
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                    }
                });
            }
        });
        Self { addr, up, redis_url: url }
    }

    /// The Redis URL that goes through this proxy (credentials and database
    /// number as in REDIS_URL).
    pub fn redis_url(&self) -> String {
        let mut url = self.redis_url.clone();
        url.set_ip_host(self.addr.ip()).unwrap();
        url.set_port(Some(self.addr.port())).unwrap();
        url.to_string()
    }

    /// Drops every connection and every new one until `restore`.
    pub fn cut(&self) {
        self.up.send_replace(false);
    }

    /// Lets traffic through again (clients reconnect by themselves).
    pub fn restore(&self) {
        self.up.send_replace(true);
    }
}
