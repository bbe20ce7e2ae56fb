//! NATS JetStream, as the relay sees it: the stream made sure of, and a
//! batch of events published with each its `Nats-Msg-Id`, their acks
//! awaited together until one deadline.

use std::{sync::Arc, time::Duration};

use async_nats::jetstream::{self, message::PublishMessage, stream};
use chrono::{DateTime, Utc};
use futures::{StreamExt, stream::FuturesUnordered};
use serde::Serialize;
use tokio::sync::Notify;

use super::store::StoredEvent;
use crate::config::{EventSettings, nats_servers_in};

/// The stream every order event goes to, and its subjects' prefix.
pub(crate) const STREAM: &str = "ORDERS";
pub(crate) const SUBJECTS: &str = "orders.>";

/// The broker drops a message whose `Nats-Msg-Id` it saw within this long:
/// longer than a relay takes to publish an event again after a publish
/// whose ack it missed, or after dying before taking it out of the outbox (another
/// instance takes the lease within 2 s and starts again from the rows).
const DUPLICATE_WINDOW: Duration = Duration::from_secs(10 * 60);

/// How long a request to the JetStream API (the stream made sure of)
/// waits for its answer.
const API_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a batch waits for the broker, from its first publish to its
/// last ack, however many events it carries (what one ack was given
/// before). Each ack awaited in turn with a timer of its own, a broker
/// gone silent held a round of 1,000 events for 33 minutes; events not
/// acknowledged in time stay in the outbox for the next round.
const ROUND_DEADLINE: Duration = Duration::from_secs(2);

/// How often the client pings a server it has heard nothing from; after
/// three unanswered it drops the connection and makes a new one. A link
/// that drops packets without a reset leaves the connection open and
/// silent, and TCP's retransmissions back off meanwhile: after a 30 s
/// cut the next one may come 20 s after the heal. At the client's
/// default (60 s) the relay sat on such a connection for minutes; at 1 s
/// it has a new one about 3 s into a cut, and again within about 2 s of
/// the heal.
const PING_EVERY: Duration = Duration::from_secs(1);

/// The event's JSON, schema version 1 (docs/events.md).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EventBody<'a> {
    pub(crate) id: &'a str,
    /// A string, as the API gives order ids: they pass 2^53.
    pub(crate) order_id: String,
    pub(crate) user_id: u64,
    pub(crate) voucher_id: u64,
    #[serde(rename = "type")]
    pub(crate) kind: &'a str,
    pub(crate) state: &'a str,
    pub(crate) at: DateTime<Utc>,
    pub(crate) schema_version: u8,
}

pub(crate) const SCHEMA_VERSION: u8 = 1;

/// An event's identity, its `Nats-Msg-Id`: an order makes each change once.
pub(crate) fn event_id(order_id: i64, kind: &str) -> String {
    format!("{order_id}-{kind}")
}

pub(super) struct Publisher {
    js: jetstream::Context,
    /// Told each time the client has a connection again.
    connected: Arc<Notify>,
    /// The order stream's `num_replicas` (`NATS_STREAM_REPLICAS`).
    replicas: usize,
}

impl Publisher {
    /// Connects in the background (the instance serves while NATS is away;
    /// the outbox keeps what it cannot hand over) and reconnects within a
    /// second of the server's return.
    pub(super) async fn connect(settings: &EventSettings) -> anyhow::Result<Self> {
        let (servers, options) = connect_options(settings)?;
        let replicas = settings.nats_stream_replicas;
        let connected = Arc::new(Notify::new());
        let told = connected.clone();
        let options = options.event_callback(move |event| {
            let told = told.clone();
            async move {
                if matches!(event, async_nats::Event::Connected) {
                    told.notify_one();
                }
            }
        });
        let client = options.connect(servers).await?;
        // An ack no longer awaited (its round past its deadline) holds one
        // of the client's 5,000 places for acks until this passes.
        let js = jetstream::ContextBuilder::new().timeout(API_TIMEOUT).ack_timeout(ROUND_DEADLINE).build(client);
        Ok(Self { js, connected, replicas })
    }

    /// Waits `backoff`, or less if the client gets a connection again
    /// meanwhile: a relay that failed on a lost broker relays again as
    /// soon as it is back, not up to a backoff later.
    pub(super) async fn back_or(&self, backoff: Duration) {
        tokio::select! {
            () = self.connected.notified() => {}
            () = tokio::time::sleep(backoff) => {}
        }
    }

    /// Creates the stream if it is missing; one that exists is left as it
    /// is (an operator's changes to it stand), but for too few replicas.
    pub(super) async fn ensure_stream(&self) -> anyhow::Result<()> {
        let stream = self
            .js
            .get_or_create_stream(stream::Config {
                name: STREAM.into(),
                subjects: vec![SUBJECTS.into()],
                storage: stream::StorageType::File,
                duplicate_window: DUPLICATE_WINDOW,
                num_replicas: self.replicas,
                ..Default::default()
            })
            .await?;
        // A stream made before the setting was raised (one server, then a
        // cluster) holds its events on fewer servers than asked: raised, so
        // that no acknowledged event rests on one server's disk. (The info
        // came with the stream: no second request.)
        let had = stream.cached_info().config.num_replicas;
        if had < self.replicas {
            self.js
                .update_stream(stream::Config { num_replicas: self.replicas, ..stream.cached_info().config.clone() })
                .await?;
            tracing::warn!(had, now = self.replicas, "the order stream's replicas raised");
        }
        Ok(())
    }

    /// Publishes the events all at once and awaits their acks together,
    /// until `ROUND_DEADLINE` from the first publish: the `seq` of those
    /// the broker acknowledged (stored, or dropped as a duplicate of one it
    /// has), in order, and the first failure.
    pub(super) async fn publish(&self, events: &[StoredEvent]) -> Published {
        let deadline = tokio::time::Instant::now() + ROUND_DEADLINE;
        let mut pending = FuturesUnordered::new();
        let mut failure = None;
        for event in events {
            let id = event_id(event.order_id, &event.kind);
            let body = EventBody {
                id: &id,
                order_id: event.order_id.to_string(),
                user_id: event.user_id,
                voucher_id: event.voucher_id,
                kind: &event.kind,
                state: &event.state,
                at: event.occurred_at.and_utc(),
                schema_version: SCHEMA_VERSION,
            };
            let payload = match serde_json::to_vec(&body) {
                Ok(payload) => payload,
                Err(err) => {
                    failure.get_or_insert(err.into());
                    continue;
                }
            };
            let message = PublishMessage::build().message_id(id).payload(payload.into());
            let sent = self.js.send_publish(format!("orders.{}", event.kind), message);
            match tokio::time::timeout_at(deadline, sent).await {
                Ok(Ok(ack)) => pending.push(async move { (event.seq, ack.await) }),
                Ok(Err(err)) => {
                    failure.get_or_insert(err.into());
                    break;
                }
                Err(_) => {
                    failure
                        .get_or_insert(anyhow::anyhow!("the client took no more publishes within {ROUND_DEADLINE:?}"));
                    break;
                }
            }
        }
        let mut published = Published { acked: Vec::with_capacity(pending.len()), duplicates: 0, failure };
        loop {
            match tokio::time::timeout_at(deadline, pending.next()).await {
                Ok(Some((seq, Ok(ack)))) => {
                    published.acked.push(seq);
                    published.duplicates += u64::from(ack.duplicate);
                }
                Ok(Some((_, Err(err)))) => {
                    published.failure.get_or_insert(err.into());
                }
                Ok(None) => break,
                Err(_) => {
                    let missing = pending.len();
                    published.failure.get_or_insert(anyhow::anyhow!(
                        "{missing} acknowledgements did not come within {ROUND_DEADLINE:?} of the first publish"
                    ));
                    break;
                }
            }
        }
        published.acked.sort_unstable();
        published
    }
}

/// The server to connect to (its URL without credentials), and how.
fn connect_options(settings: &EventSettings) -> anyhow::Result<(Vec<String>, async_nats::ConnectOptions)> {
    let (servers, options) = client_options(&settings.nats_url, &settings.nats_ca_file)?;
    let options = options
        .name("hmdp-outbox-relay")
        .retry_on_initial_connect()
        .connection_timeout(Duration::from_secs(2))
        .ping_interval(PING_EVERY)
        .reconnect_delay_callback(|attempt| Duration::from_millis((attempt as u64 * 100).min(1_000)));
    Ok((servers, options))
}

/// The servers of a `NATS_URL` (split by commas, their credentials taken
/// out) and options that present those credentials and, for `tls://` or
/// a `ca_file`, require TLS verified against it: the relay's, and those of
/// a consumer that reads what it published (the load tool's audit), which
/// must pass the same broker's door. An empty `ca_file` is none
/// (`NATS_CA_FILE` unset).
pub fn client_options(nats_url: &str, ca_file: &str) -> anyhow::Result<(Vec<String>, async_nats::ConnectOptions)> {
    let ca_file = Some(ca_file).filter(|file| !file.is_empty());
    let mut servers = Vec::new();
    let mut credentials = None;
    for url in nats_servers_in(nats_url) {
        let (server, given) = split_credentials(url)?;
        match (&credentials, given) {
            (_, None) => {}
            (None, given) => credentials = given,
            (Some(first), Some(given)) if *first == given => {}
            (Some(_), Some(_)) => anyhow::bail!("NATS_URL's servers name different credentials: one relay has one"),
        }
        servers.push(server);
    }
    anyhow::ensure!(!servers.is_empty(), "NATS_URL names no server");
    let mut options = match credentials {
        Some(Credentials::UserAndPassword(user, password)) => {
            async_nats::ConnectOptions::with_user_and_password(user, password)
        }
        Some(Credentials::Token(token)) => async_nats::ConnectOptions::with_token(token),
        None => async_nats::ConnectOptions::new(),
    };
    if let Some(ca) = ca_file {
        options = options.add_root_certificates(ca.into());
    }
    // For every server, not only the URL's: async-nats upgrades one it
    // learnt from the cluster's INFO (a plain `host:port`) only when this
    // is set or that server's INFO, which is read before TLS, asks for it.
    let tls_url = servers.iter().any(|server| url::Url::parse(server).is_ok_and(|url| url.scheme() == "tls"));
    if ca_file.is_some() || tls_url {
        options = options.require_tls(true);
    }
    Ok((servers, options))
}

/// What the relay says who it is with.
#[derive(Debug, PartialEq, Eq)]
enum Credentials {
    UserAndPassword(String, String),
    /// `nats://TOKEN@host`: a user without a password is NATS's token form.
    Token(String),
}

/// The URL without its credentials, and the credentials (percent-decoded):
/// async-nats sends a URL's user and password only when they are given
/// apart, and a server that asks for them refuses the relay otherwise.
fn split_credentials(nats_url: &str) -> anyhow::Result<(String, Option<Credentials>)> {
    let mut url = url::Url::parse(nats_url).map_err(|err| anyhow::anyhow!("NATS_URL is not a URL: {err}"))?;
    if url.username().is_empty() {
        return Ok((nats_url.to_owned(), None));
    }
    let decoded = |part: &str| percent_encoding::percent_decode_str(part).decode_utf8_lossy().into_owned();
    let credentials = match url.password() {
        Some(password) => Credentials::UserAndPassword(decoded(url.username()), decoded(password)),
        None => Credentials::Token(decoded(url.username())),
    };
    // Cannot fail for a URL with a host, which one with a user has.
    let _ = url.set_username("");
    let _ = url.set_password(None);
    Ok((url.to_string(), Some(credentials)))
}

/// What the broker said of a batch.
pub(super) struct Published {
    /// The `seq` of the events it acknowledged.
    pub(super) acked: Vec<u64>,
    /// Of those, how many it dropped as copies of events it had: published
    /// before by a relay that did not live to take them out.
    pub(super) duplicates: u64,
    pub(super) failure: Option<anyhow::Error>,
}

#[cfg(test)]
mod tests {
    use tokio::{
        io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
        net::TcpListener,
    };

    use super::{Credentials, connect_options, split_credentials};
    use crate::config::EventSettings;

    fn settings(nats_url: &str, ca_file: &str) -> EventSettings {
        EventSettings { nats_url: nats_url.into(), nats_ca_file: ca_file.into(), ..Default::default() }
    }

    #[test]
    fn a_list_of_servers_is_one_cluster_with_one_set_of_credentials() {
        let (servers, _) =
            connect_options(&settings("nats://relay:pw@10.0.0.1:4222, nats://relay:pw@10.0.0.2:4222", "")).unwrap();
        assert_eq!(servers, ["nats://10.0.0.1:4222", "nats://10.0.0.2:4222"], "the credentials go apart");
        let (servers, _) =
            connect_options(&settings("nats://relay:pw@10.0.0.1:4222,nats://10.0.0.2:4222", "")).unwrap();
        assert_eq!(servers.len(), 2);
        let mixed = connect_options(&settings("nats://relay:pw@10.0.0.1:4222,nats://other:pw@10.0.0.2:4222", ""));
        assert!(mixed.is_err(), "two relays' credentials in one list");
        let (_, options) = connect_options(&settings("nats://10.0.0.1:4222,tls://10.0.0.2:4222", "")).unwrap();
        assert!(requires_tls(&options), "one tls:// server makes TLS required of all: {options:?}");
    }

    fn requires_tls(options: &async_nats::ConnectOptions) -> bool {
        format!("{options:?}").contains("\"tls_required\": true")
    }

    /// async-nats upgrades a server it learnt from the cluster's INFO
    /// (`connect_urls`, plain `host:port`) only when the options require
    /// TLS or that server's INFO asks for it, and INFO comes before TLS: a
    /// `tls://` URL alone would send the password in the clear to such a
    /// server, or to whoever answers for it.
    #[test]
    fn a_tls_url_requires_tls_of_every_server_with_or_without_a_ca() {
        let (_, options) = connect_options(&settings("tls://relay:pw@nats.internal:4222", "")).unwrap();
        assert!(requires_tls(&options), "{options:?}");
        let (_, options) = connect_options(&settings("tls://relay:pw@nats.internal:4222", "/etc/hmdp/ca.pem")).unwrap();
        assert!(requires_tls(&options), "{options:?}");
        let (_, options) = connect_options(&settings("nats://127.0.0.1:4223", "")).unwrap();
        assert!(!requires_tls(&options), "{options:?}");
    }

    /// What the relay says in its CONNECT to a server at `nats_url`'s
    /// address (a listener of the test's, which answers INFO and reads).
    async fn connect_sent(nats_url: impl Fn(u16) -> String) -> serde_json::Value {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (server, options) = connect_options(&settings(&nats_url(port), "")).unwrap();
        let client = tokio::spawn(async move { options.connect(server).await });
        let (socket, _) = listener.accept().await.unwrap();
        let (read, mut write) = socket.into_split();
        let info = r#"{"server_id":"test","version":"2.10.0","proto":1,"max_payload":1048576,"auth_required":true}"#;
        write.write_all(format!("INFO {info}\r\n").as_bytes()).await.unwrap();
        let mut line = String::new();
        BufReader::new(read).read_line(&mut line).await.unwrap();
        client.abort();
        serde_json::from_str(line.strip_prefix("CONNECT ").expect("a CONNECT")).unwrap()
    }

    /// `nats://TOKEN@host` is NATS's token form: the token goes as
    /// `auth_token`, not as a user without a password, which a server
    /// that asks for a token refuses.
    #[tokio::test]
    async fn a_urls_token_is_sent_as_a_token_and_a_user_with_its_password() {
        let sent = connect_sent(|port| format!("nats://s3cr3t-token@127.0.0.1:{port}")).await;
        assert_eq!(sent["auth_token"], "s3cr3t-token", "{sent}");
        assert!(sent["user"].is_null() && sent["pass"].is_null(), "{sent}");
        let sent = connect_sent(|port| format!("nats://relay:p%40ss@127.0.0.1:{port}")).await;
        assert_eq!((&sent["user"], &sent["pass"]), (&"relay".into(), &"p@ss".into()), "{sent}");
        assert!(sent["auth_token"].is_null(), "{sent}");
    }

    #[test]
    fn a_urls_credentials_are_taken_out_and_decoded() {
        let (server, credentials) = split_credentials("tls://relay:p%40ss%3Aword@nats.internal:4222").unwrap();
        assert_eq!(server, "tls://nats.internal:4222");
        assert_eq!(credentials, Some(Credentials::UserAndPassword("relay".into(), "p@ss:word".into())));
        let (server, credentials) = split_credentials("nats://127.0.0.1:4223").unwrap();
        assert_eq!((server.as_str(), credentials), ("nats://127.0.0.1:4223", None));
    }
}
