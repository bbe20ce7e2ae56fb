//! axum's extractors with their rejections turned into `ApiError`, so a bad
//! body, path or query answers in the envelope like everything else.

use axum::extract::{FromRequest, FromRequestParts};

use super::error::ApiError;

#[derive(FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub(crate) struct Json<T>(pub T);

#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub(crate) struct Path<T>(pub T);

#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub(crate) struct Query<T>(pub T);

/// The client's address: `X-Real-IP` as nginx sets it (overwriting whatever
/// a client sent), else the connection's peer. The instances listen on the
/// loopback behind nginx; a deployment that exposes them directly should
/// strip the header at its edge.
#[derive(Debug, Clone)]
pub(crate) struct ClientAddr(pub String);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for ClientAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, _: &S) -> Result<Self, Self::Rejection> {
        let forwarded = parts
            .headers
            .get("x-real-ip")
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty() && v.len() <= 64);
        let peer = parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|info| info.0.ip().to_string());
        Ok(Self(forwarded.map(str::to_owned).or(peer).unwrap_or_else(|| "unknown".to_owned())))
    }
}
