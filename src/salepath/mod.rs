//! The sale path of a guarded voucher: what keeps bots off the order route
//! and meters the crowd onto it. A voucher's `guard` (chosen at creation)
//! says what a buyer must do before ordering:
//!
//! - `none`: nothing (the course's order route); a path asked for is
//!   given and ignored;
//! - `path`: ask `POST /voucher-order/seckill/{id}/path` for a signed,
//!   single-use path bound to the buyer and the voucher (`token`), and
//!   order at `POST /voucher-order/seckill/{id}/{path}`;
//! - `challenge`: the same, once a proof-of-work challenge is solved
//!   (`challenge`).
//!
//! Both guarded kinds pass the waiting room (`line`): past the voucher's
//! admission rate a buyer gets a place in line instead of a path. The
//! order route checks a path without a round trip (a signature); the
//! order script or transaction that places the order spends it.

mod challenge;
mod error;
mod guard;
mod line;
pub(crate) mod ordering;
pub(crate) mod routes;
mod service;
mod store;
mod terms;
mod token;

pub(crate) use guard::Guard;
pub(crate) use routes::routes;
pub(crate) use service::SalePath;
pub(crate) use store::record_terms;
