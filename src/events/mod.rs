//! Order events through a transactional outbox (docs/events.md): each
//! change of an order writes its event in the change's own transaction
//! (`outbox`), and a relay hands the events to NATS JetStream. The seckill
//! calls in; nothing here knows how an order is placed.
//!
//! - `change`: what an event says happened;
//! - `outbox`: the handle the order paths write through;
//! - `store`: every statement on the outbox and its lease.

mod change;
mod outbox;
mod store;

pub(crate) use change::Change;
pub(crate) use outbox::Outbox;
