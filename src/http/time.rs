//! Times on the wire: RFC 3339 with an explicit offset, as the contract
//! says. The DATETIME columns hold UTC (sqlx sets the session time zone to
//! +00:00), so a column value is read as UTC and written with `+00:00`.

use chrono::{DateTime, FixedOffset, NaiveDateTime, SecondsFormat};
use serde::{Deserialize, Deserializer, Serializer};

pub(crate) fn rfc3339(t: &NaiveDateTime) -> String {
    t.and_utc().fixed_offset().to_rfc3339_opts(SecondsFormat::Secs, false)
}

/// For `#[serde(serialize_with = "crate::http::time::serialize")]`.
pub(crate) fn serialize<S: Serializer>(t: &NaiveDateTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&rfc3339(t))
}

/// For optional columns; pair it with `skip_serializing_if = "Option::is_none"`.
pub(crate) fn serialize_opt<S: Serializer>(t: &Option<NaiveDateTime>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => serialize(t, s),
        None => s.serialize_none(),
    }
}

/// A time a client sends, for `#[serde(default, deserialize_with =
/// "crate::http::time::optional")]`: RFC 3339 with an offset, or null.
/// chrono's own refusals ("input contains invalid characters") say nothing
/// of what the field takes; this one does.
pub(crate) fn optional<'de, D: Deserializer<'de>>(de: D) -> Result<Option<DateTime<FixedOffset>>, D::Error> {
    let refusal =
        || serde::de::Error::custom("must be an RFC 3339 time with an offset, e.g. 2026-11-22T10:00:00+08:00");
    match Option::<String>::deserialize(de).map_err(|_| refusal())? {
        Some(text) => text.parse().map(Some).map_err(|_| refusal()),
        None => Ok(None),
    }
}
