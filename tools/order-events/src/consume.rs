//! The durable subscriber: fetches a batch, applies it in one transaction
//! through the inbox, then acks each message (awaiting the broker's word
//! on the ack), so that a consumer killed at any point loses nothing and
//! applies nothing twice.

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull};
use futures::StreamExt;
use sqlx::MySqlPool;

use crate::inbox::{self, Applied, Event};

/// The stream the service publishes to.
const STREAM: &str = "ORDERS";
const BATCH: usize = 500;

/// Where the stream is, as the service is told it: `NATS_URL` (a cluster's
/// servers split by commas, credentials in the URL) and, for TLS, the CA
/// its servers' certificates chain to. A consumer passes the broker's door
/// as the relay does (hmdp's own options), or a secured broker refuses it.
#[derive(Clone, Debug, clap::Args)]
pub struct Broker {
    #[arg(long, env = "NATS_URL", default_value = "nats://127.0.0.1:4223")]
    pub nats_url: String,
    /// A CA certificate (PEM) the servers' certificates must chain to; TLS
    /// is then required of each. Empty: plain, or `tls://` with the
    /// system's roots.
    #[arg(long, env = "NATS_CA_FILE", default_value = "")]
    pub nats_ca_file: String,
}

impl Broker {
    pub fn at(nats_url: &str) -> Self {
        Self { nats_url: nats_url.to_owned(), nats_ca_file: String::new() }
    }

    fn options(&self, name: &str) -> anyhow::Result<(Vec<String>, async_nats::ConnectOptions)> {
        let (servers, options) = hmdp::nats_client_options(&self.nats_url, &self.nats_ca_file)?;
        Ok((servers, options.name(name)))
    }
}

pub struct Options {
    pub broker: Broker,
    pub durable: String,
    /// Stop after this long without a message (`None`: run until killed).
    pub idle_exit: Option<Duration>,
    /// A new durable starts at the first message stored at or after this
    /// time (Unix ms) instead of the stream's first.
    pub since_ms: Option<i64>,
}

/// What one run applied.
#[derive(Debug, Default, serde::Serialize)]
pub struct Run {
    pub applied: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    pub malformed: u64,
}

impl Run {
    pub fn add(&mut self, other: &Run) {
        self.applied += other.applied;
        self.duplicates += other.duplicates;
        self.out_of_order += other.out_of_order;
        self.malformed += other.malformed;
    }
}

/// A durable made for one run (an audit's) goes when the run is over: the
/// broker would keep it, and its position, for ever.
/// A few tries, as for its creation, then an error the caller may only
/// report: what the durable held has been applied already.
pub async fn delete_durable(broker: &Broker, durable: &str) -> anyhow::Result<()> {
    let (servers, options) = broker.options("order-events-consumer")?;
    let client = options.connect(servers).await?;
    let js = jetstream::new(client);
    let mut tries = 0;
    loop {
        let deleted =
            async { js.get_stream(STREAM).await?.delete_consumer(durable).await.map_err(anyhow::Error::from) };
        match deleted.await {
            Ok(_) => return Ok(()),
            Err(err) if tries < 5 => {
                tries += 1;
                eprintln!("deleting the durable {durable}: {err}; asking again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(err) => return Err(err),
        }
    }
}

pub async fn consume(db: &MySqlPool, options: &Options) -> anyhow::Result<Run> {
    inbox::create_tables(db).await?;
    let (servers, connect) = options.broker.options("order-events-consumer")?;
    let client = connect
        .retry_on_initial_connect()
        .reconnect_delay_callback(|attempt| Duration::from_millis((attempt as u64 * 100).min(1_000)))
        .connect(servers)
        .await?;
    let js = jetstream::new(client.clone());
    let stream = loop {
        match js.get_stream(STREAM).await {
            Ok(stream) => break stream,
            // The service creates the stream when it first relays.
            Err(err) => {
                eprintln!("waiting for the {STREAM} stream: {err}");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    let config = pull::Config {
        durable_name: Some(options.durable.clone()),
        ack_policy: jetstream::consumer::AckPolicy::Explicit,
        ack_wait: Duration::from_secs(30),
        max_ack_pending: 20_000,
        deliver_policy: match options.since_ms {
            Some(ms) => jetstream::consumer::DeliverPolicy::ByStartTime {
                start_time: time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)?,
            },
            None => jetstream::consumer::DeliverPolicy::All,
        },
        ..Default::default()
    };
    // A new durable is a raft group of its own: with a broker lost, its
    // first leader may take longer to elect than the API's 5 s answer
    // timeout. Asking again under the same name is safe (it is found, not
    // made twice); the caller bounds the wait.
    let consumer = loop {
        match stream.get_or_create_consumer(&options.durable, config.clone()).await {
            Ok(consumer) => break consumer,
            Err(err) => {
                eprintln!("creating the durable {}: {err}; asking again", options.durable);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    let mut run = Run::default();
    let mut last_message = Instant::now();
    loop {
        let fetched = consumer.fetch().max_messages(BATCH).expires(Duration::from_millis(500)).messages().await;
        let mut messages = Vec::new();
        match fetched {
            Ok(mut batch) => {
                while let Some(message) = batch.next().await {
                    match message {
                        Ok(message) => messages.push(message),
                        Err(err) => eprintln!("a fetch failed: {err}"),
                    }
                }
            }
            Err(err) => eprintln!("fetching failed: {err}"),
        }
        if messages.is_empty() {
            if options.idle_exit.is_some_and(|idle| last_message.elapsed() >= idle) {
                return Ok(run);
            }
            continue;
        }
        last_message = Instant::now();
        apply_batch(db, &messages, &mut run).await?;
        for message in &messages {
            if let Err(err) = message.double_ack().await {
                // Not acknowledged: delivered again, and found in the inbox.
                eprintln!("an ack was not confirmed: {err}");
            }
        }
    }
}

async fn apply_batch(db: &MySqlPool, messages: &[jetstream::Message], run: &mut Run) -> anyhow::Result<()> {
    let mut tx = db.begin().await?;
    for message in messages {
        let seq = message.info().map(|i| i.stream_sequence).unwrap_or_default();
        let event: Event = match serde_json::from_slice(&message.payload) {
            Ok(event) => event,
            Err(err) => {
                eprintln!("stream sequence {seq}: not an order event ({err}); acknowledged and counted");
                inbox::count(&mut tx, "malformed", 1).await?;
                run.malformed += 1;
                continue;
            }
        };
        match inbox::apply(&mut tx, &event, seq).await? {
            Applied::New { in_order } => {
                run.applied += 1;
                if !in_order {
                    run.out_of_order += 1;
                    eprintln!("event {} arrived out of its order's life", event.id);
                }
            }
            Applied::Duplicate => run.duplicates += 1,
        }
    }
    tx.commit().await?;
    Ok(())
}
