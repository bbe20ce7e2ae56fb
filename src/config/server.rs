//! The HTTP server: where it listens, whose word about the client's
//! address is believed, what it closes, and who may call its admin routes.

use std::{net::IpAddr, path::PathBuf, time::Duration};

use clap::Args;

use super::redact::redacted;

const DEFAULT_BIND_ADDR: &str = "127.0.0.1:8081";

/// nginx's own `client_header_timeout` here: a request's head that has not
/// arrived by then never will, or comes from someone holding connections.
const DEFAULT_HEADER_TIMEOUT_MS: u64 = 10_000;
/// Longer than nginx's keep-alive with the instances (60 s,
/// nginx/hmdp-upstream.conf), so nginx always closes an idle connection
/// first: one the instance closed just as nginx sent a POST on it would
/// be a 502 that nginx may not retry.
const DEFAULT_KEEPALIVE_TIMEOUT_MS: u64 = 75_000;
/// nginx's own `client_body_timeout` here.
const DEFAULT_BODY_TIMEOUT_MS: u64 = 10_000;
/// The bodies here are JSON of at most 64 KiB, which any client that means
/// to send one sends in well under a second; a trickle (a byte every few
/// seconds, never pausing past `BODY_TIMEOUT_MS`) is cut off here.
const DEFAULT_BODY_DEADLINE_MS: u64 = 15_000;
/// Each open connection is a descriptor. A crowd of 20,000 gives each of two
/// instances about 10,000 of nginx's connections (`MAX_IN_FLIGHT` 12,000 of
/// them at work); past this the instance stops accepting until one closes,
/// so that a flood of connections leaves it the descriptors its database
/// and Redis connections need under a hard limit of 20,000.
const DEFAULT_MAX_CONNECTIONS: usize = 16_000;

/// Two instances share a crowd of 20,000 connections: each may hold 10,000
/// requests at once and still refuse the next in microseconds, with room
/// left under a descriptor limit of 20,000 for nginx's idle connections.
const DEFAULT_MAX_IN_FLIGHT: usize = 12_000;

/// Enough to keep MariaDB's pool, the group commit and Redis's pipeline
/// full; the crowd's 10,000 at once, measured with 256, 512 and 1,024 here,
/// sold out as fast and answered with p99 1.3-1.6 s, against 1.8-2.3 s with
/// every request worked on at once (scripts/bench-crowd).
const DEFAULT_MAX_WORKING: usize = 512;

/// An admin key is a password that a script guesses at leisure: long.
pub const MIN_ADMIN_KEY_LEN: usize = 24;
/// `.env.example`'s value: `cp .env.example .env` must not serve.
const PLACEHOLDER_ADMIN_KEY: &str = "replace-with-a-random-admin-key";

#[derive(Clone, Args)]
pub struct ServerSettings {
    /// Where the instance listens over TCP: the API, `/metrics` and
    /// `/health`. A client here is counted as its own address, whatever it
    /// claims (`TRUSTED_PROXIES`).
    #[arg(long, env = "BIND_ADDR", default_value = DEFAULT_BIND_ADDR)]
    pub bind_addr: String,

    /// Shown in `X-Instance` on every answer; also the asynchronous mode's
    /// consumer name in each voucher's stream, so each instance needs one
    /// of its own (two with one name take each other's pending orders for
    /// their own at start-up); the bound host:port when unset, which is
    /// unique as long as the instances run on different hosts or ports.
    #[arg(long, env = "INSTANCE_ID")]
    pub instance_id: Option<String>,

    /// The admin key (`X-Admin-Key`), at least 24 bytes; admin routes answer
    /// 403 to everyone while it is unset, and `.env.example`'s placeholder
    /// is refused at start-up. Wrong keys are counted
    /// (`hmdp_admin_key_failures_total`) and limited per client address:
    /// after 10 in 15 minutes, that address's admin requests answer 429 with
    /// `Retry-After` until the window ends, the right key included. A
    /// request without the header guesses nothing: it is answered 403 at
    /// once, neither counted nor held up.
    #[arg(long, env = "ADMIN_KEY", hide_env_values = true)]
    pub admin_key: Option<String>,

    /// A unix socket the instance also listens on, for nginx: what comes
    /// through it comes from nginx, whose `X-Real-IP` is believed. Made
    /// mode 0660, so that only its owner and group (nginx's workers)
    /// connect; keep it in a directory nobody else may enter. A socket file
    /// left by a dead instance is replaced; one another process answers on
    /// is refused at start-up. `scripts/stack` gives each instance one and
    /// names them in nginx's upstream.
    #[arg(long, env = "PROXY_SOCKET")]
    pub proxy_socket: Option<PathBuf>,

    /// TCP peers whose `X-Real-IP` is believed: comma-separated addresses,
    /// never ranges (a range trusts every host in it, and is refused at
    /// start-up). None by default: on one machine any process can connect
    /// from a loopback address, so nginx comes through `PROXY_SOCKET`; on
    /// the compose network nginx has an address of its own, which the
    /// instances trust. From any other peer the header is a client's claim,
    /// and per-address limits count the peer, an IPv6 one by its /64.
    /// Behind a load balancer in front of nginx, let nginx's `real_ip`
    /// module (`set_real_ip_from <the balancer>; real_ip_header
    /// X-Forwarded-For;`) turn the balancer's header into `$remote_addr`,
    /// which nginx sends on as `X-Real-IP`.
    #[arg(long, env = "TRUSTED_PROXIES", default_value = "")]
    pub trusted_proxies: TrustedProxies,

    /// How long a request's head may take to arrive, from the connection's
    /// opening for its first request and from its first byte for the next;
    /// then the connection is closed (nginx's `client_header_timeout` is the
    /// same 10 s).
    #[arg(long, env = "HEADER_TIMEOUT_MS", default_value_t = DEFAULT_HEADER_TIMEOUT_MS, value_parser = clap::value_parser!(u64).range(1..))]
    pub header_timeout_ms: u64,

    /// How long a connection may wait for its next request, or for its
    /// client to read an answer, before it is closed. Longer than nginx's
    /// keep-alive with the instances (60 s), so that nginx always closes an
    /// idle connection first.
    #[arg(long, env = "KEEPALIVE_TIMEOUT_MS", default_value_t = DEFAULT_KEEPALIVE_TIMEOUT_MS, value_parser = clap::value_parser!(u64).range(1..))]
    pub keepalive_timeout_ms: u64,

    /// How long a request's body may pause between two reads; then 408
    /// `REQUEST_TIMEOUT` (nginx's `client_body_timeout` is the same 10 s;
    /// behind nginx, which sends whole bodies, it never applies).
    #[arg(long, env = "BODY_TIMEOUT_MS", default_value_t = DEFAULT_BODY_TIMEOUT_MS, value_parser = clap::value_parser!(u64).range(1..))]
    pub body_timeout_ms: u64,

    /// How long a request's body may take in all, from its head's arrival;
    /// then 408 `REQUEST_TIMEOUT` and the connection is closed. A body is
    /// read whole before the request takes a place among those in flight
    /// and at work (`MAX_IN_FLIGHT`, `MAX_WORKING`), so a client trickling
    /// one holds its own connection and nothing else, and this bounds how
    /// long.
    #[arg(long, env = "BODY_DEADLINE_MS", default_value_t = DEFAULT_BODY_DEADLINE_MS, value_parser = clap::value_parser!(u64).range(1..))]
    pub body_deadline_ms: u64,

    /// Connections the instance holds open at once, over both listeners;
    /// past it, it accepts the next only when one closes (the kernel holds
    /// the rest in its accept queue). Each is a descriptor: with
    /// `MAX_IN_FLIGHT` at work and nginx's idle ones, this leaves MariaDB's
    /// and Redis's connections room under a hard limit of 20,000.
    #[arg(long, env = "MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_connections: usize,

    /// Requests one instance serves at once; the next is answered 503
    /// `OVERLOADED` with `Retry-After: 1` before any work is done for it,
    /// instead of waiting until nginx gives up on it (a busy instance
    /// answers; nginx takes out only one that cannot be reached). `/health`
    /// and `/metrics` are never refused. Each request in flight holds a
    /// descriptor: keep it under the instance's descriptor limit, which the
    /// instance raises to its hard limit at start.
    #[arg(long, env = "MAX_IN_FLIGHT", default_value_t = DEFAULT_MAX_IN_FLIGHT, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_in_flight: usize,

    /// Of the requests in flight, how many the instance works on at once;
    /// the others wait in line, first come first served (`/health` and
    /// `/metrics` skip it). With every request of a crowd worked on at once,
    /// each gets a sliver of the CPU and even the first answers come late;
    /// in line, the first come are answered first and the sale sells out
    /// sooner. A request takes its place once its body is whole
    /// (`BODY_DEADLINE_MS`).
    #[arg(long, env = "MAX_WORKING", default_value_t = DEFAULT_MAX_WORKING, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_working: usize,
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            bind_addr: DEFAULT_BIND_ADDR.into(),
            instance_id: None,
            admin_key: None,
            proxy_socket: None,
            trusted_proxies: TrustedProxies::default(),
            header_timeout_ms: DEFAULT_HEADER_TIMEOUT_MS,
            keepalive_timeout_ms: DEFAULT_KEEPALIVE_TIMEOUT_MS,
            body_timeout_ms: DEFAULT_BODY_TIMEOUT_MS,
            body_deadline_ms: DEFAULT_BODY_DEADLINE_MS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            max_working: DEFAULT_MAX_WORKING,
        }
    }
}

impl ServerSettings {
    pub(crate) fn validate(&self) -> anyhow::Result<()> {
        match self.admin_key.as_deref() {
            Some("") => anyhow::bail!("ADMIN_KEY is set but empty; unset it to close the admin routes"),
            Some(PLACEHOLDER_ADMIN_KEY) => {
                anyhow::bail!("ADMIN_KEY is .env.example's placeholder; put a random key in .env")
            }
            Some(key) if key.len() < MIN_ADMIN_KEY_LEN => {
                anyhow::bail!("ADMIN_KEY must be at least {MIN_ADMIN_KEY_LEN} bytes long")
            }
            _ => {}
        }
        let timeouts = [
            ("HEADER_TIMEOUT_MS", self.header_timeout_ms),
            ("KEEPALIVE_TIMEOUT_MS", self.keepalive_timeout_ms),
            ("BODY_TIMEOUT_MS", self.body_timeout_ms),
            ("BODY_DEADLINE_MS", self.body_deadline_ms),
        ];
        for (name, ms) in timeouts {
            anyhow::ensure!(ms >= 1, "{name} must be at least 1 ms");
        }
        anyhow::ensure!(self.max_connections >= 1, "MAX_CONNECTIONS must be at least 1");
        Ok(())
    }

    pub(crate) fn header_timeout(&self) -> Duration {
        Duration::from_millis(self.header_timeout_ms)
    }

    pub(crate) fn keepalive_timeout(&self) -> Duration {
        Duration::from_millis(self.keepalive_timeout_ms)
    }

    pub(crate) fn body_timeout(&self) -> Duration {
        Duration::from_millis(self.body_timeout_ms)
    }

    pub(crate) fn body_deadline(&self) -> Duration {
        Duration::from_millis(self.body_deadline_ms)
    }
}

impl std::fmt::Debug for ServerSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerSettings")
            .field("bind_addr", &self.bind_addr)
            .field("instance_id", &self.instance_id)
            .field("admin_key", &redacted(self.admin_key.is_some()))
            .field("proxy_socket", &self.proxy_socket)
            .field("trusted_proxies", &self.trusted_proxies)
            .field("header_timeout_ms", &self.header_timeout_ms)
            .field("keepalive_timeout_ms", &self.keepalive_timeout_ms)
            .field("body_timeout_ms", &self.body_timeout_ms)
            .field("max_connections", &self.max_connections)
            .field("max_in_flight", &self.max_in_flight)
            .field("max_working", &self.max_working)
            .finish()
    }
}

/// The TCP peers allowed to say who the client is (`TRUSTED_PROXIES`):
/// single addresses, because a range trusts every host in it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpAddr>);

impl TrustedProxies {
    pub(crate) fn trusts(&self, peer: IpAddr) -> bool {
        let peer = match peer {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, IpAddr::V4),
            v4 => v4,
        };
        self.0.contains(&peer)
    }
}

impl std::str::FromStr for TrustedProxies {
    type Err = String;

    /// `10.0.0.5,fd00::5`; a block of one (`10.0.0.5/32`) is that address,
    /// any wider block is refused.
    fn from_str(list: &str) -> Result<Self, Self::Err> {
        list.split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(|item| {
                if let Ok(address) = item.parse::<IpAddr>() {
                    return Ok(address);
                }
                match item.parse::<ipnet::IpNet>() {
                    Ok(net) if net.prefix_len() == net.max_prefix_len() => Ok(net.addr()),
                    Ok(_) => Err(format!(
                        "TRUSTED_PROXIES: {item:?} is a range; name each proxy's address (a range trusts every host in it)"
                    )),
                    Err(_) => Err(format!("TRUSTED_PROXIES: {item:?} is not an address")),
                }
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }
}

#[cfg(test)]
mod tests {
    use super::TrustedProxies;

    #[test]
    fn trusted_proxies_are_addresses_and_a_range_is_refused() {
        let proxies: TrustedProxies = "10.0.0.5, fd00::5,192.168.1.9/32".parse().unwrap();
        assert!(proxies.trusts("10.0.0.5".parse().unwrap()));
        assert!(proxies.trusts("::ffff:10.0.0.5".parse().unwrap()), "an IPv4 peer seen through IPv6");
        assert!(proxies.trusts("fd00::5".parse().unwrap()));
        assert!(proxies.trusts("192.168.1.9".parse().unwrap()));
        assert!(!proxies.trusts("10.0.0.6".parse().unwrap()));
        assert!(!proxies.trusts("127.0.0.1".parse().unwrap()));
        for refused in ["127.0.0.0/8", "10.0.0.0/24", "::1/64", "nginx"] {
            assert!(refused.parse::<TrustedProxies>().is_err(), "{refused}");
        }
        let none: TrustedProxies = "".parse().unwrap();
        assert!(!none.trusts("127.0.0.1".parse().unwrap()), "nobody by default");
    }
}
