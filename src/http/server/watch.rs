//! What closes a connection that stalls. hyper, as axum serves it, runs
//! without a timer, so a client that sends its head a byte at a time, or
//! opens a connection and says nothing, holds it (and a descriptor) for
//! ever. Here each connection carries a deadline: its head must arrive
//! within `HEADER_TIMEOUT_MS` (from the opening for the first request, from
//! its first byte for the next), an idle connection lasts
//! `KEEPALIVE_TIMEOUT_MS`, and none applies while a request is served. The
//! deadline is kept by the connection's IO, which the connection's own task
//! polls: no task per connection, and a timer only while one waits.

use std::{
    io,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed},
    },
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    sync::OwnedSemaphorePermit,
    time::{Instant, Sleep},
};

/// One connection's deadline, shared by its IO (which enforces it and sees
/// the first byte of a request) and its service (which sees a request
/// begin and end).
pub(crate) struct Watch {
    opened: Instant,
    header_timeout: Duration,
    keepalive_timeout: Duration,
    /// Milliseconds since `opened` at which the connection is closed;
    /// `NO_DEADLINE` while a request is served.
    deadline_ms: AtomicU64,
    /// Whether the deadline is the keep-alive one (nothing of a next request
    /// yet), which the first byte of a request turns into a header one.
    idle: AtomicBool,
    /// Requests in service (HTTP/2 may serve several at once).
    serving: AtomicU32,
    listener: &'static str,
}

const NO_DEADLINE: u64 = u64::MAX;

impl Watch {
    pub(super) fn new(header_timeout: Duration, keepalive_timeout: Duration, listener: &'static str) -> Self {
        let watch = Self {
            opened: Instant::now(),
            header_timeout,
            keepalive_timeout,
            deadline_ms: AtomicU64::new(NO_DEADLINE),
            idle: AtomicBool::new(false),
            serving: AtomicU32::new(0),
            listener,
        };
        // The first request's head is due from the opening: a connection
        // that never says anything is closed like a slow one.
        watch.set_deadline(header_timeout);
        watch
    }

    fn set_deadline(&self, from_now: Duration) {
        let at = self.opened.elapsed() + from_now;
        self.deadline_ms.store(u64::try_from(at.as_millis()).unwrap_or(NO_DEADLINE - 1), Relaxed);
    }

    pub(super) fn request_started(&self) {
        self.serving.fetch_add(1, Relaxed);
        self.deadline_ms.store(NO_DEADLINE, Relaxed);
    }

    /// The answer is ready (or the request was dropped): the connection
    /// waits for the next request, or for its client to read this answer.
    pub(super) fn request_ended(&self) {
        if self.serving.fetch_sub(1, Relaxed) == 1 {
            self.idle.store(true, Relaxed);
            self.set_deadline(self.keepalive_timeout);
        }
    }

    /// Bytes arrived: on an idle connection, the next request's head has
    /// begun, and is due within the header timeout.
    fn bytes_arrived(&self) {
        if self.idle.load(Relaxed) && self.serving.load(Relaxed) == 0 {
            self.idle.store(false, Relaxed);
            self.set_deadline(self.header_timeout);
        }
    }

    fn deadline(&self) -> Option<Instant> {
        match self.deadline_ms.load(Relaxed) {
            NO_DEADLINE => None,
            ms => Some(self.opened + Duration::from_millis(ms)),
        }
    }

    fn timed_out(&self) -> io::Error {
        let (reason, what) = if self.idle.load(Relaxed) {
            ("keepalive", "no request within KEEPALIVE_TIMEOUT_MS")
        } else {
            ("header", "no whole request head within HEADER_TIMEOUT_MS")
        };
        metrics::counter!("hmdp_connections_timed_out_total", "listener" => self.listener, "reason" => reason)
            .increment(1);
        tracing::debug!(listener = self.listener, reason, "connection closed");
        io::Error::new(io::ErrorKind::TimedOut, what)
    }
}

/// A connection's IO with its deadline: a read or write that would wait
/// past it fails instead, and hyper closes the connection. It also holds
/// the connection's place under `MAX_CONNECTIONS` until it is dropped.
pub(crate) struct Watched<IO> {
    io: IO,
    watch: Arc<Watch>,
    /// Set no later than the deadline while the IO waits and one applies.
    timer: Option<Pin<Box<Sleep>>>,
    _place: OwnedSemaphorePermit,
}

impl<IO> Watched<IO> {
    pub(super) fn new(io: IO, watch: Watch, place: OwnedSemaphorePermit) -> Self {
        metrics::gauge!("hmdp_connections_open", "listener" => watch.listener).increment(1.0);
        Self { io, watch: Arc::new(watch), timer: None, _place: place }
    }

    pub(super) fn watch(&self) -> &Arc<Watch> {
        &self.watch
    }

    /// The IO would wait: fine until the deadline, an error past it. The
    /// timer wakes the connection's task by the deadline to find that out.
    /// A timer set earlier than the deadline is left as it is (when it goes
    /// off, it is set again for the deadline then due): a connection that
    /// serves request after request moves its deadline later each time, and
    /// resetting a timer for each would cost every request a trip through
    /// the runtime's timer wheel. Only a deadline that moved earlier (the
    /// next request's head has begun) resets it.
    fn waiting(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let Some(deadline) = self.watch.deadline() else { return Poll::Pending };
        let timer = self.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if timer.deadline() > deadline {
            timer.as_mut().reset(deadline);
        }
        loop {
            match timer.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(()) if timer.deadline() >= deadline => return Poll::Ready(self.watch.timed_out()),
                // It went off for a deadline that has moved on since.
                Poll::Ready(()) => timer.as_mut().reset(deadline),
            }
        }
    }
}

impl<IO> Drop for Watched<IO> {
    fn drop(&mut self) {
        metrics::gauge!("hmdp_connections_open", "listener" => self.watch.listener).decrement(1.0);
    }
}

/// What an IO call returned, or the deadline's error when it would wait.
fn or_deadline<IO, T>(
    watched: &mut Watched<IO>,
    cx: &mut Context<'_>,
    polled: Poll<io::Result<T>>,
) -> Poll<io::Result<T>> {
    match polled {
        Poll::Pending => watched.waiting(cx).map(Err),
        done => done,
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Watched<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.watch.bytes_arrived();
        }
        or_deadline(this, cx, polled)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Watched<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.io).poll_write(cx, buf);
        or_deadline(this, cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        or_deadline(this, cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.io).poll_flush(cx);
        or_deadline(this, cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
