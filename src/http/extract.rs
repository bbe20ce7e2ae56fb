//! axum's extractors with their rejections turned into `ApiError`, so a bad
//! body, path or query answers in the envelope like everything else.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{FromRef, FromRequest, FromRequestParts};

use super::error::ApiError;
use crate::config::TrustedProxies;

#[derive(FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub(crate) struct Json<T>(pub T);

#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub(crate) struct Path<T>(pub T);

#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub(crate) struct Query<T>(pub T);

/// A voucher's or a shop's id in a path: a non-negative 64-bit signed
/// integer, as the OpenAPI document says (`int64`, minimum 0), so a client
/// generated from it and the server agree on every value.
#[derive(Debug, Clone, Copy, serde::Deserialize)]
#[serde(try_from = "u64")]
pub(crate) struct Id(pub u64);

impl TryFrom<u64> for Id {
    type Error = String;

    fn try_from(id: u64) -> Result<Self, Self::Error> {
        if i64::try_from(id).is_ok() { Ok(Self(id)) } else { Err(format!("an id is at most {}", i64::MAX)) }
    }
}

/// The client, as per-address limits count it: `X-Real-IP` (nginx sets it,
/// overwriting whatever a client sent) when the peer is a trusted proxy
/// (`TRUSTED_PROXIES`), else the peer itself; anyone else's header is a
/// claim that would let one client pass for thousands. An IPv6 client is
/// counted by its /64, the block one subscriber gets: counting single
/// addresses would hand an attacker 2^64 of them.
#[derive(Debug, Clone)]
pub(crate) struct ClientAddr(pub String);

impl<S> axum::extract::FromRequestParts<S> for ClientAddr
where
    S: Send + Sync,
    TrustedProxies: FromRef<S>,
{
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Self::Rejection> {
        let peer = parts.extensions.get::<axum::extract::ConnectInfo<SocketAddr>>().map(|info| info.0.ip());
        let forwarded = || parts.headers.get("x-real-ip")?.to_str().ok()?.trim().parse::<IpAddr>().ok();
        let client = match peer {
            Some(peer) if TrustedProxies::from_ref(state).trusts(peer) => forwarded().or(Some(peer)),
            other => other,
        };
        Ok(Self(client.map_or_else(|| "unknown".to_owned(), counted_as)))
    }
}

/// An IPv4 client as itself, an IPv6 one as its /64.
fn counted_as(client: IpAddr) -> String {
    match client {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_none() => {
            let net = ipnet::Ipv6Net::new(v6, 64).expect("64 is a valid prefix").trunc();
            net.to_string()
        }
        IpAddr::V6(v6) => v6.to_ipv4_mapped().expect("mapped").to_string(),
        v4 => v4.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::counted_as;

    #[test]
    fn an_ipv6_client_is_counted_by_its_64_and_an_ipv4_one_by_itself() {
        assert_eq!(counted_as("2001:db8:1:2:aaaa::1".parse().unwrap()), "2001:db8:1:2::/64");
        assert_eq!(counted_as("2001:db8:1:2:bbbb::9".parse().unwrap()), "2001:db8:1:2::/64");
        assert_eq!(counted_as("::ffff:203.0.113.7".parse().unwrap()), "203.0.113.7");
        assert_eq!(counted_as("203.0.113.7".parse().unwrap()), "203.0.113.7");
    }
}
