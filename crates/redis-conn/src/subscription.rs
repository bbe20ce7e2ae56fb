//! One pattern subscription kept alive until told to stop, reconnecting
//! after failures to the next node each time: on a cluster a classic
//! publish on any node reaches a subscriber on any other, so a dead master
//! only moves the subscription. Messages are a shortcut for their
//! listeners (each has a slower way to learn the same), so the loop only
//! says when it may have missed some (`on_connect`).

use std::{future::Future, time::Duration};

use futures::StreamExt;

/// Between a failed or dropped subscription and the next try.
const RETRY_AFTER: Duration = Duration::from_millis(500);

/// Listens on `pattern` through `nodes` (tried in turn) until `stop`
/// resolves: `on_connect` after each (re)subscription, `on_message` for
/// each message. `what` names the subscription in the log.
pub async fn listen(
    nodes: Vec<redis::Client>,
    pattern: &str,
    what: &str,
    mut on_connect: impl FnMut(),
    mut on_message: impl FnMut(&redis::Msg),
    stop: impl Future<Output = ()>,
) {
    let mut stop = std::pin::pin!(stop);
    if nodes.is_empty() {
        tracing::warn!(what, "no Redis node to subscribe through");
        return;
    }
    for client in nodes.iter().cycle() {
        match subscribe(client, pattern).await {
            Ok(stream) => {
                on_connect();
                let mut stream = std::pin::pin!(stream);
                loop {
                    tokio::select! {
                        () = &mut stop => return,
                        msg = stream.next() => match msg {
                            Some(msg) => on_message(&msg),
                            None => break,
                        },
                    }
                }
                tracing::warn!(what, "subscription dropped; reconnecting");
            }
            Err(err) => tracing::warn!(what, error = %err, "subscribing failed; retrying"),
        }
        tokio::select! {
            () = &mut stop => return,
            () = tokio::time::sleep(RETRY_AFTER) => {}
        }
    }
}

async fn subscribe(client: &redis::Client, pattern: &str) -> redis::RedisResult<redis::aio::PubSubStream> {
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.psubscribe(pattern).await?;
    Ok(pubsub.into_on_message())
}
