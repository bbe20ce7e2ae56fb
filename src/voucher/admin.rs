//! The admin guard. Unlike the course project, admin routes are never open:
//! without a configured ADMIN_KEY they answer 403 to everyone.

use axum::{extract::FromRequestParts, http::request::Parts};
use subtle::ConstantTimeEq;

use crate::{http::ApiError, state::AppState};

pub const ADMIN_KEY_HEADER: &str = "x-admin-key";

/// Present in a handler's arguments: the request carried the admin key.
pub struct Admin;

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let Some(expected) = state.config.admin_key.as_deref() else {
            return Err(ApiError::Forbidden);
        };
        let given = parts.headers.get(ADMIN_KEY_HEADER).map(|v| v.as_bytes()).unwrap_or_default();
        // Constant time in the key's content; only its length can leak.
        if bool::from(given.ct_eq(expected.as_bytes())) { Ok(Admin) } else { Err(ApiError::Forbidden) }
    }
}
