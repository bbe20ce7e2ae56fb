//! The admin guard. Unlike the course project, admin routes are never open:
//! without a configured ADMIN_KEY they answer 403 to everyone.

use std::sync::Arc;

use axum::{
    extract::{FromRef, FromRequestParts},
    http::request::Parts,
};
use subtle::ConstantTimeEq;

use crate::{config::Config, http::ApiError};

pub(super) const ADMIN_KEY_HEADER: &str = "x-admin-key";

/// Present in a handler's arguments: the request carried the admin key.
pub(crate) struct Admin;

impl<S> FromRequestParts<S> for Admin
where
    S: Send + Sync,
    Arc<Config>: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let config = Arc::<Config>::from_ref(state);
        let Some(expected) = config.server.admin_key.as_deref() else {
            return Err(ApiError::Forbidden);
        };
        let given = parts.headers.get(ADMIN_KEY_HEADER).map(|v| v.as_bytes()).unwrap_or_default();
        // Constant time in the key's content; only its length can leak.
        if bool::from(given.ct_eq(expected.as_bytes())) { Ok(Admin) } else { Err(ApiError::Forbidden) }
    }
}
