#![warn(unreachable_pub)]
//! hmdp-rs: a voucher flash-sale (seckill) backend.
//!
//! Where a request goes, by folder: `http` (envelope, errors, request id,
//! tracing), `auth` (SMS code login, sessions, the refresh and login
//! layers), `ids` (order ids), `lock` (the per-user Redis lock), `voucher`
//! (admin and listing), `salepath` (the path, challenge and waiting room
//! of guarded vouchers), `seckill` (placing orders). The strategy lab and
//! the load tool are programs of their own (`tools/`), built on this one.

pub mod auth;
pub mod config;
mod connect;
pub mod dependency;
mod errors;
mod events;
mod http;
pub mod ids;
pub mod keys;
mod monitoring;
mod openapi;
#[cfg(test)]
mod plan_check;
mod recent;
mod salepath;
mod schema;
pub mod seckill;
pub mod startup;
mod state;
mod voucher;

use axum::{Router, middleware};

pub use config::Config;
pub use events::nats_client_options;
/// The per-user lock, a crate of its own: the compiler keeps it from
/// importing anything of the app.
pub use hmdp_lock as lock;
pub use state::AppState;

/// The whole service. The refresh layer wraps every route; the login layer
/// wraps only the protected ones.
pub fn app(state: AppState) -> Router {
    let protected = auth::protect(auth::user_routes().merge(seckill::routes()).merge(salepath::routes()));
    let routes = Router::new()
        .merge(http::health::routes())
        .merge(auth::public_routes())
        .merge(voucher::routes())
        .merge(protected)
        // Its state is cloned into every request: one `Arc`, not every store.
        .layer(middleware::from_fn_with_state(std::sync::Arc::new(state.auth.clone()), auth::refresh_session))
        // Scrapes and the API's own description need no session.
        .merge(monitoring::routes())
        .merge(openapi::routes());
    let instance_id = state.instance_id().to_owned();
    let limits =
        http::Limits { in_flight: state.config.server.max_in_flight, working: state.config.server.max_working };
    http::with_plumbing(routes.with_state(state), &instance_id, limits)
}
