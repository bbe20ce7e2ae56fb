//! What a group's `Debug` shows of a secret: that it is set, never what.

pub(super) fn redacted(set: bool) -> &'static str {
    if set { "<redacted>" } else { "<unset>" }
}

/// A URL with its password replaced, for logs.
pub(super) fn without_password(url: &str) -> String {
    match (url.split_once("://"), url.rfind('@')) {
        (Some((scheme, rest)), Some(at)) if at > scheme.len() + 3 => {
            let credentials = &rest[..at - scheme.len() - 3];
            let user = credentials.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:<redacted>@{}", &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}
