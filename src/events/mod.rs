//! Order events through a transactional outbox (docs/events.md): each
//! change of an order writes its event in the change's own transaction
//! (`outbox`), and a relay hands the events to NATS JetStream. The seckill
//! calls in; nothing here knows how an order is placed.
//!
//! - `change`: what an event says happened;
//! - `outbox`: the handle the order paths write through;
//! - `relay`: the one instance at a time that publishes, and its lease;
//! - `cursor`: where the relay's next read starts;
//! - `publisher`: NATS JetStream, the stream and the event's JSON;
//! - `store`: every statement on the outbox and its lease.

mod change;
mod cursor;
mod outbox;
mod publisher;
mod relay;
mod store;

pub(crate) use change::{Change, OrderCreated};
pub(crate) use outbox::Outbox;
pub use publisher::client_options as nats_client_options;

use std::sync::Arc;

use sqlx::MySqlPool;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::config::{Config, OrderEvents};

/// The owner of the relay: started with the instance, stopped (its lease
/// given up) at shutdown. Without `ORDER_EVENTS=nats` there is none.
pub(crate) struct Events {
    outbox: Outbox,
    relay: Option<relay::Relay>,
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl Events {
    pub(crate) fn new(config: &Config, db: &MySqlPool) -> Self {
        let relay = (config.events.order_events == OrderEvents::Nats).then(|| relay::Relay {
            db: db.clone(),
            settings: config.events.clone(),
            holder: format!("{}#{}", config.instance_id(), uuid::Uuid::new_v4().simple()),
            written: Arc::default(),
        });
        let outbox = Outbox::new(config.events.written(), relay.as_ref().map(|r| r.written.clone()));
        Self { outbox, relay, stop: CancellationToken::new(), tasks: TaskTracker::new() }
    }

    pub(crate) fn outbox(&self) -> Outbox {
        self.outbox.clone()
    }

    /// Starts the relay, once.
    pub(crate) fn start(&mut self) {
        if let Some(relay) = self.relay.take() {
            self.tasks.spawn(relay.run(self.stop.clone()));
        }
    }

    pub(crate) async fn shutdown(&self) {
        self.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}
