//! A request's body is read whole at the door, before the request reaches
//! the routes. The caps on requests in flight and at work (`MAX_IN_FLIGHT`,
//! `MAX_WORKING`) are taken only by a request that has all it needs: a
//! client trickling a body a byte every few seconds waits here, holding a
//! connection of its own and nothing the working requests need. Two
//! deadlines bound the wait: the body may pause at most `BODY_TIMEOUT_MS`
//! between two reads, and must be whole within `BODY_DEADLINE_MS` of its
//! head, so a trickle that never pauses long enough still runs out.
//!
//! A body that could not be had whole goes on as a `BodyRefused` in the
//! request's extensions, with no body: the plumbing answers it at once (408,
//! 413 or 400) and it never takes a place or reaches a handler, so a crowd
//! of trickles reaching their deadline together never stands in line before
//! the buyers.

use std::time::Duration;

use axum::{
    body::{Body, Bytes},
    extract::Request,
};
use futures::StreamExt;
use tokio::time::Instant;

use crate::http::error::{BODY_LIMIT, BodyRefused};

/// How long a body may take.
#[derive(Clone, Copy, Debug)]
pub(super) struct BodyDeadlines {
    /// Between two reads.
    pub(super) gap: Duration,
    /// From the head to the body's end.
    pub(super) whole: Duration,
}

/// The request with its body read whole, or without one and refused.
pub(super) async fn arrive(req: Request, deadlines: BodyDeadlines) -> Request {
    let (mut parts, body) = req.into_parts();
    let body = match read(body, deadlines).await {
        Ok(bytes) => Body::from(bytes),
        Err(refused) => {
            parts.extensions.insert(refused);
            Body::empty()
        }
    };
    Request::from_parts(parts, body)
}

async fn read(body: Body, deadlines: BodyDeadlines) -> Result<Bytes, BodyRefused> {
    let mut stream = body.into_data_stream();
    let whole_by = Instant::now() + deadlines.whole;
    let mut first: Option<Bytes> = None;
    let mut rest: Vec<u8> = Vec::new();
    loop {
        let due = (Instant::now() + deadlines.gap).min(whole_by);
        let chunk = match tokio::time::timeout_at(due, stream.next()).await {
            Err(_) => return Err(BodyRefused::Stalled),
            Ok(None) => break,
            Ok(Some(Ok(chunk))) => chunk,
            // The client went away, or sent what is no HTTP body.
            Ok(Some(Err(_))) => return Err(BodyRefused::Unreadable),
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
        // Past the limit nothing more is read.
        if first.as_ref().map_or(rest.len(), Bytes::len) > BODY_LIMIT {
            return Err(BodyRefused::TooLarge);
        }
    }
    Ok(first.unwrap_or_else(|| Bytes::from(rest)))
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

    fn refused(req: &Request) -> Option<BodyRefused> {
        req.extensions().get::<BodyRefused>().copied()
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_in_pieces_is_handed_on_whole() {
        let pieces = stream::iter(["{\"a\":", " 1", "}"].map(|s| Ok::<_, std::io::Error>(Bytes::from(s))));
        let req = arrive(request(Body::from_stream(pieces)), DEADLINES).await;
        assert_eq!(refused(&req), None);
        assert_eq!(axum::body::to_bytes(req.into_body(), usize::MAX).await.unwrap(), "{\"a\": 1}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickle_that_never_pauses_past_the_gap_is_still_refused_at_the_whole_deadline() {
        let started = Instant::now();
        // A byte every 150 ms: under the gap (200 ms), for ever.
        let trickle = stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_millis(150)).await;
            Some((Ok::<_, std::io::Error>(Bytes::from_static(b"x")), ()))
        });
        let req = arrive(request(Body::from_stream(trickle)), DEADLINES).await;
        assert_eq!(refused(&req), Some(BodyRefused::Stalled));
        assert_eq!(started.elapsed(), Duration::from_millis(500));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_pauses_past_the_gap_is_refused_then() {
        let started = Instant::now();
        let pause = stream::unfold(0, |n| async move {
            tokio::time::sleep(Duration::from_millis(if n == 0 { 10 } else { 1_000 })).await;
            Some((Ok::<_, std::io::Error>(Bytes::from_static(b"x")), n + 1))
        });
        let req = arrive(request(Body::from_stream(pause)), DEADLINES).await;
        assert_eq!(refused(&req), Some(BodyRefused::Stalled));
        assert_eq!(started.elapsed(), Duration::from_millis(210));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_past_the_limit_is_refused_without_reading_the_rest() {
        let endless = stream::repeat_with(|| Ok::<_, std::io::Error>(Bytes::from(vec![b'x'; 1_000])));
        let req = arrive(request(Body::from_stream(endless)), DEADLINES).await;
        assert_eq!(refused(&req), Some(BodyRefused::TooLarge));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_fails_to_arrive_is_refused_as_unreadable() {
        let broken = stream::iter([Err::<Bytes, _>(std::io::Error::other("reset"))]);
        let req = arrive(request(Body::from_stream(broken)), DEADLINES).await;
        assert_eq!(refused(&req), Some(BodyRefused::Unreadable));
    }
}
