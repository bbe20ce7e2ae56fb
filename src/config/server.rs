//! The HTTP server, who may call its admin routes, and whose word about
//! the client's address is believed.

use clap::Args;

use super::redact::redacted;

const DEFAULT_BIND_ADDR: &str = "127.0.0.1:8081";
/// nginx in front, on this machine.
const DEFAULT_TRUSTED_PROXIES: &str = "127.0.0.0/8,::1/128";

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
    #[arg(long, env = "BIND_ADDR", default_value = DEFAULT_BIND_ADDR)]
    pub bind_addr: String,

    /// Shown in `X-Instance`; defaults to the bound host:port.
    #[arg(long, env = "INSTANCE_ID")]
    pub instance_id: Option<String>,

    /// Admin routes answer 403 to everyone while this is unset.
    #[arg(long, env = "ADMIN_KEY", hide_env_values = true)]
    pub admin_key: Option<String>,

    /// Peers whose `X-Real-IP` is believed (comma-separated addresses or
    /// CIDR blocks): nginx in front. From anyone else the header is a
    /// client's claim, and per-address limits count the peer instead.
    #[arg(long, env = "TRUSTED_PROXIES", default_value = DEFAULT_TRUSTED_PROXIES)]
    pub trusted_proxies: TrustedProxies,

    /// Requests one instance serves at once; the next is answered 503
    /// `OVERLOADED` with `Retry-After` at once, before any work, instead of
    /// waiting in a queue until nginx gives up on it. `/health` and
    /// `/metrics` are never refused.
    #[arg(long, env = "MAX_IN_FLIGHT", default_value_t = DEFAULT_MAX_IN_FLIGHT, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_in_flight: usize,

    /// Of the requests in flight, how many the instance works on at once;
    /// the others wait in line, first come first served. With every request
    /// of a crowd worked on at once, each gets a sliver of the CPU and the
    /// first answers come after a second; in line, the first come are
    /// answered first and the line moves faster.
    #[arg(long, env = "MAX_WORKING", default_value_t = DEFAULT_MAX_WORKING, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_working: usize,
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            bind_addr: DEFAULT_BIND_ADDR.into(),
            instance_id: None,
            admin_key: None,
            trusted_proxies: DEFAULT_TRUSTED_PROXIES.parse().expect("the default parses"),
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
            _ => Ok(()),
        }
    }
}

impl std::fmt::Debug for ServerSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerSettings")
            .field("bind_addr", &self.bind_addr)
            .field("instance_id", &self.instance_id)
            .field("admin_key", &redacted(self.admin_key.is_some()))
            .field("trusted_proxies", &self.trusted_proxies)
            .field("max_in_flight", &self.max_in_flight)
            .field("max_working", &self.max_working)
            .finish()
    }
}

/// The peers allowed to say who the client is (`TRUSTED_PROXIES`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrustedProxies(Vec<ipnet::IpNet>);

impl TrustedProxies {
    pub(crate) fn trusts(&self, peer: std::net::IpAddr) -> bool {
        let peer = match peer {
            std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, std::net::IpAddr::V4),
            v4 => v4,
        };
        self.0.iter().any(|net| net.contains(&peer))
    }
}

impl std::str::FromStr for TrustedProxies {
    type Err = String;

    /// `10.0.0.0/8,192.168.1.7,::1`: a bare address is a block of one.
    fn from_str(list: &str) -> Result<Self, Self::Err> {
        list.split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(|item| {
                item.parse::<ipnet::IpNet>()
                    .or_else(|_| item.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                    .map_err(|_| format!("TRUSTED_PROXIES: {item:?} is neither an address nor a CIDR block"))
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }
}
