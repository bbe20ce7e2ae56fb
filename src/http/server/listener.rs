//! The listeners: TCP at `BIND_ADDR`, and nginx's unix socket at
//! `PROXY_SOCKET`. Each accepts only while the instance has a place under
//! `MAX_CONNECTIONS` (the places are shared), and hands every connection
//! over with its deadline (`watch.rs`) and whose it is (`Peer`).

use std::{
    io,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use anyhow::Context;
use tokio::{
    net::{TcpListener, TcpStream, UnixListener, UnixStream},
    sync::Semaphore,
};

use super::watch::{Watch, Watched};

/// Whose connection a request came on; in every request's extensions.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Peer {
    /// A TCP client (or a proxy of `TRUSTED_PROXIES`).
    Tcp(std::net::SocketAddr),
    /// nginx, through its socket.
    Proxy,
}

/// Asked of `listen(2)`, which lowers it to the kernel's `somaxconn`.
/// tokio's own bind asks for 1,024: a crowd opening nginx's upstream
/// connections at once overflowed it, and a connection the kernel drops
/// there is retried only after a second, then three (the tail of the sale).
const LISTEN_BACKLOG: u32 = 65_535;

pub(super) async fn bind_tcp(addr: &str) -> anyhow::Result<TcpListener> {
    let mut last_err = None;
    for addr in tokio::net::lookup_host(addr).await? {
        let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
        // A restarted instance binds while the old one's connections linger.
        socket.set_reuseaddr(true)?;
        match socket.bind(addr).and_then(|()| socket.listen(LISTEN_BACKLOG)) {
            Ok(listener) => return Ok(listener),
            Err(err) => last_err = Some(err),
        }
    }
    Err(last_err.map_or_else(|| anyhow::anyhow!("the address resolves to nothing"), anyhow::Error::from))
}

/// Binds nginx's socket, mode 0660. A socket file left by an instance that
/// died is replaced; one another process still answers on is not.
pub(super) fn bind_unix(path: &Path) -> anyhow::Result<UnixListener> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        anyhow::ensure!(meta.file_type().is_socket(), "{} exists and is not a socket", path.display());
        match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => anyhow::bail!("another process listens on {}", path.display()),
            Err(err) if err.kind() == io::ErrorKind::ConnectionRefused => {
                std::fs::remove_file(path).with_context(|| format!("removing the stale socket {}", path.display()))?
            }
            Err(err) => return Err(err).with_context(|| format!("checking {}", path.display())),
        }
    }
    let socket = tokio::net::UnixSocket::new_stream()?;
    socket.bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))?;
    Ok(socket.listen(LISTEN_BACKLOG)?)
}

/// What a connection is given when it is accepted.
#[derive(Clone)]
pub(super) struct Terms {
    pub(super) places: Arc<Semaphore>,
    pub(super) header_timeout: Duration,
    pub(super) keepalive_timeout: Duration,
}

/// A listener that accepts within the instance's places.
pub(super) struct Door<L> {
    inner: L,
    terms: Terms,
}

impl<L> Door<L> {
    pub(super) fn new(inner: L, terms: Terms) -> Self {
        Self { inner, terms }
    }
}

/// The one thing the two listeners differ in, to the rest of the door.
pub(super) trait Accept: Send + 'static {
    type Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static;
    const NAME: &'static str;
    fn accept(&self) -> impl Future<Output = io::Result<(Self::Io, Peer)>> + Send;
    fn local(&self) -> io::Result<Peer>;
}

impl Accept for TcpListener {
    type Io = TcpStream;
    const NAME: &'static str = "tcp";

    async fn accept(&self) -> io::Result<(TcpStream, Peer)> {
        TcpListener::accept(self).await.map(|(stream, addr)| (stream, Peer::Tcp(addr)))
    }

    fn local(&self) -> io::Result<Peer> {
        self.local_addr().map(Peer::Tcp)
    }
}

impl Accept for UnixListener {
    type Io = UnixStream;
    const NAME: &'static str = "proxy";

    async fn accept(&self) -> io::Result<(UnixStream, Peer)> {
        UnixListener::accept(self).await.map(|(stream, _)| (stream, Peer::Proxy))
    }

    fn local(&self) -> io::Result<Peer> {
        Ok(Peer::Proxy)
    }
}

impl<L: Accept> axum::serve::Listener for Door<L> {
    type Io = Watched<L::Io>;
    type Addr = Peer;

    async fn accept(&mut self) -> (Self::Io, Peer) {
        let place = match self.terms.places.clone().try_acquire_owned() {
            Ok(place) => place,
            Err(_) => {
                metrics::counter!("hmdp_connections_cap_reached_total", "listener" => L::NAME).increment(1);
                tracing::warn!(listener = L::NAME, "MAX_CONNECTIONS open: accepting again when one closes");
                self.terms.places.clone().acquire_owned().await.expect("the places are never closed")
            }
        };
        loop {
            match self.inner.accept().await {
                Ok((io, peer)) => {
                    let watch = Watch::new(self.terms.header_timeout, self.terms.keepalive_timeout, L::NAME);
                    return (Watched::new(io, watch, place), peer);
                }
                Err(err) => accept_failed(err).await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<Peer> {
        self.inner.local()
    }
}

/// As axum's own listeners do: a connection that failed before it was
/// accepted is the client's affair; anything else (out of descriptors) is
/// logged, and accepting waits a second.
async fn accept_failed(err: io::Error) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(err.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset) {
        return;
    }
    tracing::error!(error = %err, "accept failed");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Removes nginx's socket when the instance stops, so that nginx finds
/// nothing there rather than a file nobody answers on.
pub(super) struct SocketFile(pub(super) PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
