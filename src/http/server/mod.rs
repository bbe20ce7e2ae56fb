//! The instance's front door: where it listens, whose word about the
//! client it believes, and what it closes.
//!
//! Two listeners serve the same routes. nginx comes through a unix socket
//! (`PROXY_SOCKET`), which only nginx's workers may open, so its
//! `X-Real-IP` is believed from there; on the TCP port (`BIND_ADDR`:
//! metrics, health, a client straight at the instance) the peer is the
//! client unless it is one of `TRUSTED_PROXIES`. A connection is closed when
//! its request head stalls or it idles too long (`watch.rs`), a request's
//! body is read whole before the routes see it, and one that stalls or
//! trickles past its deadline is answered 408 (`arrival.rs`), and past
//! `MAX_CONNECTIONS` the instance stops accepting until one closes
//! (`listener.rs`).

mod arrival;
mod listener;
mod watch;

use std::{
    convert::Infallible,
    future::{Future, IntoFuture, Ready, ready},
    net::SocketAddr,
    path::PathBuf,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use anyhow::Context as _;
use axum::{
    Router, body::HttpBody, extract::Request, response::Response, routing::future::RouteFuture, serve::IncomingStream,
};
use futures::future::{BoxFuture, Either};
use tokio::{
    net::{TcpListener, UnixListener},
    sync::Semaphore,
};
use tokio_util::sync::CancellationToken;
use tower::{Service, ServiceExt};

pub(crate) use self::listener::Peer;
use self::{
    arrival::BodyDeadlines,
    listener::{Accept, Door, SocketFile, Terms},
    watch::Watch,
};
use crate::config::ServerSettings;

/// Bound listeners, not yet serving.
pub(crate) struct Server {
    tcp: TcpListener,
    proxy: Option<(UnixListener, SocketFile)>,
    terms: Terms,
    body: BodyDeadlines,
}

impl Server {
    pub(crate) async fn bind(settings: &ServerSettings) -> anyhow::Result<Self> {
        let tcp =
            listener::bind_tcp(&settings.bind_addr).await.with_context(|| format!("binding {}", settings.bind_addr))?;
        let proxy = match &settings.proxy_socket {
            Some(path) => {
                let socket = listener::bind_unix(path).with_context(|| format!("binding {}", path.display()))?;
                Some((socket, SocketFile(path.clone())))
            }
            None => None,
        };
        let terms = Terms {
            places: Arc::new(Semaphore::new(settings.max_connections.min(Semaphore::MAX_PERMITS))),
            header_timeout: settings.header_timeout(),
            keepalive_timeout: settings.keepalive_timeout(),
        };
        let body = BodyDeadlines { gap: settings.body_timeout(), whole: settings.body_deadline() };
        Ok(Self { tcp, proxy, terms, body })
    }

    pub(crate) fn tcp_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    pub(crate) fn proxy_socket(&self) -> Option<&PathBuf> {
        self.proxy.as_ref().map(|(_, file)| &file.0)
    }

    /// Serves the routes on both listeners until `shutdown` resolves; then
    /// neither accepts, and each waits for its connections' requests in
    /// flight to be answered. nginx's socket file is removed at the end.
    pub(crate) async fn serve(self, router: Router, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let stop = CancellationToken::new();
        let connections = Connections { router, body: self.body };
        let tcp = axum::serve(Door::new(self.tcp, self.terms.clone()), connections.clone())
            .with_graceful_shutdown(stop.clone().cancelled_owned())
            .into_future();
        let (proxy, socket_file) = self.proxy.unzip();
        let proxy = async {
            match proxy {
                Some(socket) => {
                    axum::serve(Door::new(socket, self.terms), connections)
                        .with_graceful_shutdown(stop.clone().cancelled_owned())
                        .await
                }
                None => Ok(()),
            }
        };
        let signal = async {
            shutdown.await;
            stop.cancel();
        };
        let ((), tcp, proxy) = tokio::join!(signal, tcp, proxy);
        drop(socket_file);
        tcp.context("serving TCP")?;
        proxy.context("serving nginx's socket")
    }
}

/// Makes each connection's service: the routes, told whose connection it
/// is, and its deadline.
#[derive(Clone)]
struct Connections {
    router: Router,
    body: BodyDeadlines,
}

impl<L: Accept> Service<IncomingStream<'_, Door<L>>> for Connections {
    type Response = Connection;
    type Error = Infallible;
    type Future = Ready<Result<Connection, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, stream: IncomingStream<'_, Door<L>>) -> Self::Future {
        ready(Ok(Connection {
            router: self.router.clone(),
            peer: *stream.remote_addr(),
            watch: stream.io().watch().clone(),
            body: self.body,
        }))
    }
}

#[derive(Clone)]
struct Connection {
    router: Router,
    peer: Peer,
    watch: Arc<Watch>,
    body: BodyDeadlines,
}

impl Service<Request> for Connection {
    type Response = Response;
    type Error = Infallible;
    type Future = Serving;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request) -> Serving {
        req.extensions_mut().insert(self.peer);
        let in_service = InService::begin(&self.watch);
        // A request without a body goes straight on; one with a body goes
        // on once it is whole (or has failed), and only then takes a place
        // among the requests in flight.
        let inner = if req.body().is_end_stream() {
            Either::Left(self.router.call(req))
        } else {
            let (router, deadlines) = (self.router.clone(), self.body);
            Either::Right(Box::pin(async move { router.oneshot(arrival::arrive(req, deadlines).await).await })
                as BoxFuture<'static, _>)
        };
        Serving { inner, in_service: Some(in_service) }
    }
}

/// A request in service: no deadline applies to its connection until it
/// is answered or dropped.
struct InService(Arc<Watch>);

impl InService {
    fn begin(watch: &Arc<Watch>) -> Self {
        watch.request_started();
        Self(watch.clone())
    }
}

impl Drop for InService {
    fn drop(&mut self) {
        self.0.request_ended();
    }
}

pin_project_lite::pin_project! {
    pub(crate) struct Serving {
        #[pin]
        inner: Either<RouteFuture<Infallible>, BoxFuture<'static, Result<Response, Infallible>>>,
        in_service: Option<InService>,
    }
}

impl Future for Serving {
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let answered = std::task::ready!(this.inner.poll(cx));
        this.in_service.take();
        Poll::Ready(answered)
    }
}
