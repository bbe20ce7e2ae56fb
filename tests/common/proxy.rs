//! A TCP proxy a test can cut, to make a client lose Redis the way a crashed
//! or partitioned instance would, while the test's own client keeps it.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

pub struct Proxy {
    addr: SocketAddr,
    cut: CancellationToken,
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
        let mut proxy = Self::start(target).await;
        proxy.redis_url = url;
        proxy
    }

    async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = CancellationToken::new();
        let stop = cut.clone();
        tokio::spawn(async move {
            loop {
                let (mut inbound, _) = tokio::select! {
                    () = stop.cancelled() => return, // the listener closes: refused from now on
                    accepted = listener.accept() => match accepted { Ok(a) => a, Err(_) => return },
                };
                let stop = stop.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(target).await else { return };
                    tokio::select! {
                        () = stop.cancelled() => {}
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                    }
                });
            }
        });
        let redis_url = reqwest::Url::parse("redis://127.0.0.1").unwrap();
        Self { addr, cut, redis_url }
    }

    /// The Redis URL that goes through this proxy (credentials and database
    /// number as in REDIS_URL).
    pub fn redis_url(&self) -> String {
        let mut url = self.redis_url.clone();
        url.set_ip_host(self.addr.ip()).unwrap();
        url.set_port(Some(self.addr.port())).unwrap();
        url.to_string()
    }

    /// Drops every connection and refuses new ones.
    pub fn cut(&self) {
        self.cut.cancel();
    }
}
