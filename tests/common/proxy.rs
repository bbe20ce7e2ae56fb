//! A TCP proxy a test can cut, to make a client lose Redis the way a crashed
//! or partitioned instance would, while the test's own client keeps it.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

pub struct Proxy {
    addr: SocketAddr,
    cut: CancellationToken,
}

impl Proxy {
    pub async fn start(target: SocketAddr) -> Self {
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
        Self { addr, cut }
    }

    pub fn redis_url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Drops every connection and refuses new ones.
    pub fn cut(&self) {
        self.cut.cancel();
    }
}
