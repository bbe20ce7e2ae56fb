//! Order events: whether each change of an order is written to the
//! outbox in its own transaction, and the broker the relay hands them to.

use clap::{Args, ValueEnum};

use super::redact::without_password;

const DEFAULT_NATS_URL: &str = "nats://127.0.0.1:4223";
const DEFAULT_OUTBOX_RETENTION_S: u64 = 0;
const DEFAULT_NATS_STREAM_REPLICAS: usize = 1;

/// Whether order events are written at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OrderEvents {
    /// No outbox row is written: nothing downstream hears of an order
    /// except by reading MariaDB.
    Off,
    /// Each change of an order writes its event in the change's own
    /// transaction, and one instance at a time relays them to NATS
    /// JetStream (`NATS_URL`).
    Nats,
}

#[derive(Clone, Args)]
pub struct EventSettings {
    /// `off` or `nats`: whether each change of an order (created, paid,
    /// used, cancelled, expired, refunded, failed) writes its event to
    /// `tb_order_outbox` in the same transaction, for a relay to publish to
    /// NATS JetStream. Off, the outbox is never written, so it cannot grow
    /// without a broker to empty it. docs/events.md.
    #[arg(long, env = "ORDER_EVENTS", value_enum, default_value_t = OrderEvents::Off)]
    pub order_events: OrderEvents,

    /// The NATS server (JetStream enabled) the relay publishes to, with
    /// `ORDER_EVENTS=nats`; `nats://user:password@host:port` for a server
    /// that asks for credentials (a `@`, `:` or `%` in them
    /// percent-encoded), `nats://token@host:port` for one that asks for a
    /// token, `tls://` for TLS, then required of every server of its
    /// cluster too. A cluster's servers may be listed, split by commas,
    /// each the same way (one set of credentials): the relay starts with
    /// any that answers. The stack's own runs on 4223.
    #[arg(long, env = "NATS_URL", default_value = DEFAULT_NATS_URL)]
    pub nats_url: String,

    /// Servers of the order stream that hold each event before the broker
    /// acknowledges it (JetStream's `num_replicas`, 1 to 5). With 3 on a
    /// three-server cluster, a publish is acknowledged once two of them
    /// have it, so the relay deletes an outbox row only when losing one
    /// server, its disk with it, cannot lose the event. A stream made with
    /// fewer is raised to this at start-up. docs/events.md.
    #[arg(long, env = "NATS_STREAM_REPLICAS", default_value_t = DEFAULT_NATS_STREAM_REPLICAS)]
    pub nats_stream_replicas: usize,

    /// A CA certificate (PEM) the NATS server's certificate must chain to,
    /// for a `tls://` URL; empty: the system's roots.
    #[arg(long, env = "NATS_CA_FILE", default_value = "")]
    pub nats_ca_file: String,

    /// How long a published event is kept (in `tb_order_outbox_published`),
    /// for a replay from MariaDB, before it is deleted in small batches; 0
    /// to 604,800. At 0 each event is deleted as soon as the broker has it
    /// (the stream is the record), which costs MariaDB less than keeping it.
    #[arg(long, env = "OUTBOX_RETENTION_S", default_value_t = DEFAULT_OUTBOX_RETENTION_S)]
    pub outbox_retention_s: u64,
}

impl Default for EventSettings {
    fn default() -> Self {
        Self {
            order_events: OrderEvents::Off,
            nats_url: DEFAULT_NATS_URL.to_owned(),
            nats_stream_replicas: DEFAULT_NATS_STREAM_REPLICAS,
            nats_ca_file: String::new(),
            outbox_retention_s: DEFAULT_OUTBOX_RETENTION_S,
        }
    }
}

impl EventSettings {
    pub(crate) fn validate(&self) -> anyhow::Result<()> {
        if self.outbox_retention_s > 7 * 24 * 3_600 {
            anyhow::bail!("OUTBOX_RETENTION_S must be between 0 and 604800 (a week)");
        }
        if self.order_events == OrderEvents::Nats && self.nats_url.trim().is_empty() {
            anyhow::bail!("ORDER_EVENTS=nats needs NATS_URL");
        }
        if self.order_events == OrderEvents::Nats && self.nats_servers().any(|url| url::Url::parse(url).is_err()) {
            anyhow::bail!(
                "NATS_URL is not a URL, or a list of them split by commas (nats://host:port, or tls://user:password@host:port)"
            );
        }
        if !(1..=5).contains(&self.nats_stream_replicas) {
            anyhow::bail!("NATS_STREAM_REPLICAS must be between 1 and 5 (JetStream's bound)");
        }
        Ok(())
    }

    /// `NATS_URL`'s servers: one URL, or several split by commas (the
    /// servers of a cluster, tried in turn when one is down).
    pub fn nats_servers(&self) -> impl Iterator<Item = &str> {
        nats_servers_in(&self.nats_url)
    }

    /// Whether orders write their events.
    pub fn written(&self) -> bool {
        self.order_events != OrderEvents::Off
    }
}

/// The servers a `NATS_URL` names: the relay's settings and a consumer's
/// (the load tool's audit) read one the same way.
pub(crate) fn nats_servers_in(nats_url: &str) -> impl Iterator<Item = &str> {
    nats_url.split(',').map(str::trim).filter(|url| !url.is_empty())
}

impl std::fmt::Debug for EventSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSettings")
            .field("order_events", &self.order_events)
            .field("nats_url", &self.nats_servers().map(without_password).collect::<Vec<_>>().join(","))
            .field("nats_stream_replicas", &self.nats_stream_replicas)
            .field("nats_ca_file", &self.nats_ca_file)
            .field("outbox_retention_s", &self.outbox_retention_s)
            .finish()
    }
}
