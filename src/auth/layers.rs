//! The two layers of the course project, in its order: a refresh layer on
//! every route that turns a token into a user and slides the session, and a
//! login layer on protected routes that rejects requests without one.

use std::{
    convert::Infallible,
    future::{Ready, ready},
    sync::Arc,
    task::{Context, Poll},
};

use axum::{
    extract::{FromRequestParts, Request, State},
    http::{HeaderMap, header::AUTHORIZATION, request::Parts},
    middleware::Next,
    response::{IntoResponse, Response},
};

use futures::future::Either;
use tower::{Layer, Service};

use super::{session::UserProfile, state::Auth};
use crate::http::ApiError;

/// The logged-in user of this request, put into the extensions by
/// `refresh_session`.
#[derive(Debug, Clone)]
pub(crate) struct CurrentUser {
    pub(crate) id: u64,
    pub(crate) session_id: String,
    pub(crate) profile: UserProfile,
}

/// Left in the extensions when the session could not be looked up because
/// Redis failed, so the login layer answers 503 instead of a misleading 401.
#[derive(Debug, Clone, Copy)]
struct SessionLookupFailed;

/// Never rejects: a missing, bad or dead token simply leaves the request
/// without a user, and the routes that need one say so.
pub(crate) async fn refresh_session(State(auth): State<Arc<Auth>>, mut req: Request, next: Next) -> Response {
    if let Some(token) = bearer_token(req.headers())
        && let Ok(claims) = auth.tokens.verify(token)
    {
        match auth.sessions.load_and_touch(&claims.sid).await {
            Ok(Some(profile)) if claims.sub.parse() == Ok(profile.id) => {
                req.extensions_mut().insert(CurrentUser { id: profile.id, session_id: claims.sid, profile });
            }
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(error = %err, "session lookup failed");
                req.extensions_mut().insert(SessionLookupFailed);
            }
        }
    }
    next.run(req).await
}

/// The login layer: a request without a user goes no further. A tower
/// layer rather than `from_fn`: it decides from the extensions alone, so it
/// needs neither a boxed future nor a clone of the routes per request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequireLoginLayer;

impl<S> Layer<S> for RequireLoginLayer {
    type Service = RequireLogin<S>;

    fn layer(&self, inner: S) -> RequireLogin<S> {
        RequireLogin { inner }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct RequireLogin<S> {
    inner: S,
}

impl<S> Service<Request> for RequireLogin<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<S::Future, Ready<Result<Response, Infallible>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let extensions = req.extensions();
        let refused = if extensions.get::<CurrentUser>().is_some() {
            return Either::Left(self.inner.call(req));
        } else if extensions.get::<SessionLookupFailed>().is_some() {
            ApiError::unavailable(anyhow::anyhow!("session store unreachable"))
        } else {
            ApiError::Unauthorized("login required")
        };
        Either::Right(ready(Ok(refused.into_response())))
    }
}

/// The token, bare (Heima style) or as `Bearer <token>`.
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?.trim();
    let token = match value.split_once(' ') {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => rest.trim(),
        Some(_) => return None,
        None if value.eq_ignore_ascii_case("bearer") => return None,
        None => value,
    };
    (!token.is_empty()).then_some(token)
}

impl<S: Send + Sync> FromRequestParts<S> for CurrentUser {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        // Taken, not cloned: a handler asks for its user once, and a clone
        // would copy three strings per request.
        parts.extensions.remove::<CurrentUser>().ok_or(ApiError::Unauthorized("login required"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, value.parse().unwrap());
        h
    }

    #[test]
    fn tokens_are_read_bare_or_as_bearer() {
        assert_eq!(bearer_token(&headers("abc.def.ghi")), Some("abc.def.ghi"));
        assert_eq!(bearer_token(&headers("Bearer abc.def.ghi")), Some("abc.def.ghi"));
        assert_eq!(bearer_token(&headers("bearer  abc")), Some("abc"));
        assert_eq!(bearer_token(&headers("Basic dXNlcjpwYXNz")), None);
        assert_eq!(bearer_token(&headers("Bearer ")), None);
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }
}
