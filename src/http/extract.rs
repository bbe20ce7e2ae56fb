//! axum's extractors with their rejections turned into `ApiError`, so a bad
//! body, path or query answers in the envelope like everything else.

use std::net::IpAddr;

use axum::{
    body::Bytes,
    extract::{FromRef, FromRequest, FromRequestParts, Request},
    http::{HeaderMap, header::CONTENT_TYPE},
};
use serde::de::DeserializeOwned;

use super::{error::ApiError, server::Peer};
use crate::config::TrustedProxies;

/// A JSON body, which every route that takes one documents as an object:
/// anything else (an array, which serde would read as the fields in
/// order, a number, a string) is a 400 before a field is read.
pub(crate) struct Json<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        if !says_json(req.headers()) {
            return Err(ApiError::validation("expected a body with content-type application/json"));
        }
        let RawBody(body) = RawBody::from_request(req, state).await?;
        json_object(&body).map(Json)
    }
}

/// `application/json`, or any `application/...+json`, as axum's own `Json`
/// takes it.
fn says_json(headers: &HeaderMap) -> bool {
    let Some(essence) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else { return false };
    let essence = essence.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    essence.strip_prefix("application/").is_some_and(|subtype| subtype == "json" || subtype.ends_with("+json"))
}

/// A body that must be a JSON object, read into `T`.
pub(crate) fn json_object<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.trim_ascii_start().first() != Some(&b'{') {
        return Err(ApiError::validation("the body must be a JSON object"));
    }
    super::malformed::read_json(body).map_err(ApiError::Validation)
}

/// A body as it came, with its refusals in the envelope: 413 past the body
/// limit, 408 when it pauses past `BODY_TIMEOUT_MS`.
pub(crate) struct RawBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        Ok(Self(Bytes::from_request(req, state).await?))
    }
}

#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub(crate) struct Path<T>(pub T);

#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub(crate) struct Query<T>(pub T);

/// A voucher's, a shop's or an order's id in a path: a non-negative 64-bit
/// signed integer, as the OpenAPI document says (`int64`, minimum 0), so a
/// client generated from it and the server agree on every value.
#[derive(Debug, Clone, Copy, serde::Deserialize)]
#[serde(try_from = "u64")]
pub(crate) struct Id(pub u64);

impl Id {
    /// As MariaDB's BIGINT holds it: an id is at most `i64::MAX`.
    pub(crate) fn signed(self) -> i64 {
        self.0 as i64
    }
}

impl TryFrom<u64> for Id {
    type Error = String;

    fn try_from(id: u64) -> Result<Self, Self::Error> {
        if i64::try_from(id).is_ok() { Ok(Self(id)) } else { Err(format!("an id is at most {}", i64::MAX)) }
    }
}

/// The client, as per-address limits count it: `X-Real-IP` (nginx sets it,
/// overwriting whatever a client sent) when the request came through
/// nginx's socket or from a trusted proxy (`TRUSTED_PROXIES`), else the
/// peer itself; anyone else's header is a claim that would let one client
/// pass for thousands. An IPv6 client is counted by its /64, the block one
/// subscriber gets: counting single addresses would hand an attacker 2^64
/// of them. For the same reason every loopback address is one client.
#[derive(Debug, Clone)]
pub(crate) struct ClientAddr(pub String);

impl<S> axum::extract::FromRequestParts<S> for ClientAddr
where
    S: Send + Sync,
    TrustedProxies: FromRef<S>,
{
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Self::Rejection> {
        let forwarded = || parts.headers.get("x-real-ip")?.to_str().ok()?.trim().parse::<IpAddr>().ok();
        let client = match parts.extensions.get::<Peer>() {
            Some(Peer::Proxy) => forwarded(),
            Some(Peer::Tcp(peer)) if TrustedProxies::from_ref(state).trusts(peer.ip()) => {
                forwarded().or(Some(peer.ip()))
            }
            Some(Peer::Tcp(peer)) => Some(peer.ip()),
            None => None,
        };
        Ok(Self(client.map_or_else(|| "unknown".to_owned(), counted_as)))
    }
}

/// An IPv4 client as itself, an IPv6 one as its /64, and every loopback
/// address as one host: 127.0.0.0/8 is sixteen million aliases of the same
/// machine, and counted one by one each would be a fresh budget for a
/// client on it.
fn counted_as(client: IpAddr) -> String {
    match client.to_canonical() {
        ip if ip.is_loopback() => LOOPBACK.to_owned(),
        IpAddr::V6(v6) => {
            let net = ipnet::Ipv6Net::new(v6, 64).expect("64 is a valid prefix").trunc();
            net.to_string()
        }
        v4 => v4.to_string(),
    }
}

/// How every loopback client is counted.
const LOOPBACK: &str = "loopback";

#[cfg(test)]
mod tests {
    use super::{counted_as, json_object, says_json};

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Form {
        a: u8,
        b: String,
    }

    #[test]
    fn a_body_is_read_only_as_a_json_object() {
        assert!(json_object::<Form>(br#" {"a": 1, "b": "x"}"#).is_ok());
        for refused in [&br#"[1, "x"]"#[..], b"1", br#""x""#, b"null", b"", b"  "] {
            assert!(json_object::<Form>(refused).is_err(), "{}", String::from_utf8_lossy(refused));
        }
    }

    #[test]
    fn json_is_application_json_or_a_json_suffix() {
        let with = |value: &str| {
            let mut headers = axum::http::HeaderMap::new();
            headers.insert("content-type", value.parse().unwrap());
            says_json(&headers)
        };
        assert!(with("application/json"));
        assert!(with("Application/JSON; charset=utf-8"));
        assert!(with("application/merge-patch+json"));
        assert!(!with("text/json"));
        assert!(!with("application/jsonx"));
        assert!(!with("text/plain"));
        assert!(!says_json(&axum::http::HeaderMap::new()));
    }

    #[test]
    fn an_ipv6_client_is_counted_by_its_64_and_an_ipv4_one_by_itself() {
        assert_eq!(counted_as("2001:db8:1:2:aaaa::1".parse().unwrap()), "2001:db8:1:2::/64");
        assert_eq!(counted_as("2001:db8:1:2:bbbb::9".parse().unwrap()), "2001:db8:1:2::/64");
        assert_eq!(counted_as("::ffff:203.0.113.7".parse().unwrap()), "203.0.113.7");
        assert_eq!(counted_as("203.0.113.7".parse().unwrap()), "203.0.113.7");
    }

    #[test]
    fn every_loopback_alias_is_counted_as_the_one_host_it_is() {
        for alias in ["127.0.0.1", "127.0.0.2", "127.0.1.9", "127.255.255.254", "::1", "::ffff:127.0.0.3"] {
            assert_eq!(counted_as(alias.parse().unwrap()), "loopback", "{alias}");
        }
        assert_eq!(counted_as("128.0.0.1".parse().unwrap()), "128.0.0.1");
    }
}
