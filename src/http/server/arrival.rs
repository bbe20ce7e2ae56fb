//! A request's body is read whole at the door, before the request reaches
//! the routes. The caps on requests in flight and at work (`MAX_IN_FLIGHT`,
//! `MAX_WORKING`) are taken only by a request that has all it needs: a
//! client trickling a body a byte every few seconds waits here, holding a
//! connection of its own and nothing the working requests need. Two
//! deadlines bound the wait: the body may pause at most `BODY_TIMEOUT_MS`
//! between two reads, and must be whole within `BODY_DEADLINE_MS` of its
//! head, so a trickle that never pauses long enough still runs out.
//!
//! What went wrong is handed on inside the body, and the routes answer it
//! in the envelope as they always have: a body that stalled fails with
//! `BodyStalled` (408), and one past the limit is handed on cut just past
//! the limit, which the routes' own body limit refuses (413).

use std::time::Duration;

use axum::{
    body::{Body, Bytes, HttpBody},
    extract::Request,
};
use futures::StreamExt;
use tokio::time::Instant;

use crate::http::error::{BODY_LIMIT, BodyStalled};

/// How long a body may take.
#[derive(Clone, Copy, Debug)]
pub(super) struct BodyDeadlines {
    /// Between two reads.
    pub(super) gap: Duration,
    /// From the head to the body's end.
    pub(super) whole: Duration,
}

/// The request with its body read: whole, cut past the limit, or failing
/// with what stopped it.
pub(super) async fn arrive(req: Request, deadlines: BodyDeadlines) -> Request {
    let (parts, body) = req.into_parts();
    let body = match read(body, deadlines).await {
        Ok(bytes) => Body::from(bytes),
        Err(err) => Body::new(Failed(Some(err))),
    };
    Request::from_parts(parts, body)
}

async fn read(body: Body, deadlines: BodyDeadlines) -> Result<Bytes, axum::Error> {
    let mut stream = body.into_data_stream();
    let whole_by = Instant::now() + deadlines.whole;
    let mut first: Option<Bytes> = None;
    let mut rest: Vec<u8> = Vec::new();
    loop {
        let due = (Instant::now() + deadlines.gap).min(whole_by);
        let chunk = match tokio::time::timeout_at(due, stream.next()).await {
            Err(_) => return Err(axum::Error::new(BodyStalled)),
            Ok(None) => break,
            Ok(Some(chunk)) => chunk?,
        };
        // Most bodies come in one chunk: kept as it is, without a copy.
        match &first {
            None if rest.is_empty() => first = Some(chunk),
            _ => {
                if let Some(first) = first.take() {
                    rest.extend_from_slice(&first);
                }
                rest.extend_from_slice(&chunk);
            }
        }
        let read = first.as_ref().map_or(rest.len(), Bytes::len);
        // Past the limit nothing more is read: the routes refuse it (413).
        if read > BODY_LIMIT {
            break;
        }
    }
    Ok(first.unwrap_or_else(|| Bytes::from(rest)))
}

/// A body whose reading failed: it yields the failure once.
struct Failed(Option<axum::Error>);

impl HttpBody for Failed {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        std::task::Poll::Ready(self.0.take().map(Err))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::body::Body;
    use futures::stream;

    use super::*;

    const DEADLINES: BodyDeadlines =
        BodyDeadlines { gap: Duration::from_millis(200), whole: Duration::from_millis(500) };

    fn request(body: Body) -> Request {
        Request::post("/").body(body).unwrap()
    }

    async fn bytes_of(req: Request) -> Result<Bytes, axum::Error> {
        axum::body::to_bytes(req.into_body(), usize::MAX).await
    }

    fn stalled(err: &axum::Error) -> bool {
        let err: &(dyn std::error::Error + 'static) = err;
        std::iter::successors(Some(err), |err| err.source()).any(|err| err.is::<BodyStalled>())
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_in_pieces_is_handed_on_whole() {
        let pieces = stream::iter(["{\"a\":", " 1", "}"].map(|s| Ok::<_, std::io::Error>(Bytes::from(s))));
        let req = arrive(request(Body::from_stream(pieces)), DEADLINES).await;
        assert_eq!(bytes_of(req).await.unwrap(), "{\"a\": 1}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickle_that_never_pauses_past_the_gap_still_fails_at_the_whole_deadline() {
        let started = Instant::now();
        // A byte every 150 ms: under the gap (200 ms), for ever.
        let trickle = stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_millis(150)).await;
            Some((Ok::<_, std::io::Error>(Bytes::from_static(b"x")), ()))
        });
        let req = arrive(request(Body::from_stream(trickle)), DEADLINES).await;
        let err = bytes_of(req).await.unwrap_err();
        assert!(stalled(&err), "{err:?}");
        assert_eq!(started.elapsed(), Duration::from_millis(500));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_pauses_past_the_gap_fails_then() {
        let started = Instant::now();
        let pause = stream::unfold(0, |n| async move {
            tokio::time::sleep(Duration::from_millis(if n == 0 { 10 } else { 1_000 })).await;
            Some((Ok::<_, std::io::Error>(Bytes::from_static(b"x")), n + 1))
        });
        let err = bytes_of(arrive(request(Body::from_stream(pause)), DEADLINES).await).await.unwrap_err();
        assert!(stalled(&err), "{err:?}");
        assert_eq!(started.elapsed(), Duration::from_millis(210));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_past_the_limit_is_cut_just_past_it() {
        let endless = stream::repeat_with(|| Ok::<_, std::io::Error>(Bytes::from(vec![b'x'; 1_000])));
        let req = arrive(request(Body::from_stream(endless)), DEADLINES).await;
        let read = bytes_of(req).await.unwrap().len();
        assert!(read > BODY_LIMIT && read <= BODY_LIMIT + 1_000, "{read}");
    }
}
