//! What a group's `Debug` shows of a secret: that it is set, never what.

pub(super) fn redacted(set: bool) -> &'static str {
    if set { "<redacted>" } else { "<unset>" }
}

/// A URL as a log or an error may show it: `user:<redacted>@` for a user
/// and password, and `<redacted>@` for credentials without a `:`, which
/// are a user for MariaDB and Redis but the token itself in NATS's
/// `nats://TOKEN@host` (and the password to redis-cli): what they are
/// cannot be told from the URL alone.
pub fn without_password(url: &str) -> String {
    match (url.split_once("://"), url.rfind('@')) {
        (Some((scheme, rest)), Some(at)) if at > scheme.len() + 3 => {
            let credentials = &rest[..at - scheme.len() - 3];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{scheme}://{user}:<redacted>@{}", &url[at + 1..]),
                None => format!("{scheme}://<redacted>@{}", &url[at + 1..]),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::without_password;

    #[test]
    fn a_urls_password_or_lone_credential_is_not_shown() {
        let shown = |url| without_password(url);
        assert_eq!(shown("mysql://hmdp:pa@ss@10.0.0.20:3306/hmdp"), "mysql://hmdp:<redacted>@10.0.0.20:3306/hmdp");
        assert_eq!(shown("redis://:redis-pass@127.0.0.1:6379"), "redis://:<redacted>@127.0.0.1:6379");
        assert_eq!(shown("nats://nats-token@127.0.0.1:4222"), "nats://<redacted>@127.0.0.1:4222");
        assert_eq!(shown("mysql://root@127.0.0.1:3306/hmdp"), "mysql://<redacted>@127.0.0.1:3306/hmdp");
        assert_eq!(shown("nats://127.0.0.1:4223"), "nats://127.0.0.1:4223");
    }
}
