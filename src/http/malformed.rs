//! What a 400 says about a body, a path or a query the service cannot read:
//! the field, in the API's own names, and what it takes, in words a client
//! developer finds in docs/api.md. Never a library's own text: serde's and
//! axum's messages name Rust types (`u64`, `untagged enum Nonce`), list a
//! struct's fields, or echo whole inputs.

use axum::extract::{path::ErrorKind, rejection::PathRejection, rejection::QueryRejection};
use serde::de::DeserializeOwned;
use serde_json::error::Category;

/// Reads a JSON body into `T`, or says in the API's words what is wrong.
pub(crate) fn read_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let field = field_name(&err.path().to_string());
        explain_json(&field, err.inner())
    })?;
    de.end().map_err(|_| "the body holds more than one JSON value".to_owned())?;
    Ok(value)
}

/// `.` is the body itself; a field is quoted as the client wrote it.
fn field_name(path: &str) -> String {
    if path == "." { "the body".to_owned() } else { format!("`{path}`") }
}

fn explain_json(field: &str, err: &serde_json::Error) -> String {
    match err.classify() {
        Category::Syntax => format!("the body is not valid JSON (line {}, column {})", err.line(), err.column()),
        Category::Eof => "the body is not valid JSON: it ends too early".to_owned(),
        Category::Io => "the body could not be read".to_owned(),
        Category::Data => {
            // serde's text, less serde_json's position ("... at line 1 column 9").
            let text = err.to_string();
            let text = text.rsplit_once(" at line ").map_or(text.as_str(), |(text, _)| text);
            explain_data(field, text)
        }
    }
}

/// serde's data errors, by their fixed openings (serde::de::Error's default
/// messages); anything else is a message of this service's own
/// deserializers (`whole`, `time`), already in the API's words.
fn explain_data(field: &str, text: &str) -> String {
    if let Some(name) = quoted_after(text, "missing field ") {
        return format!("`{name}` is required");
    }
    if let Some(name) = quoted_after(text, "unknown field ") {
        return format!("`{name}` is not a field of this request");
    }
    if let Some(rest) = text.strip_prefix("invalid type: ") {
        let expected = rest.rsplit_once(", expected ").map(|(_, expected)| expected);
        return match expected.and_then(described) {
            Some(what) => format!("{field} must be {what}"),
            None => format!("{field} has a value of the wrong kind"),
        };
    }
    if let Some(rest) = text.strip_prefix("invalid value: ") {
        let (unexpected, expected) = rest.rsplit_once(", expected ").unwrap_or((rest, ""));
        return match described(expected) {
            Some("a whole number") if unexpected.starts_with("integer ") => format!("{field} is out of range"),
            Some(what) => format!("{field} must be {what}"),
            None => format!("{field} is not a value it takes"),
        };
    }
    if text.starts_with("invalid length ") {
        return format!("{field} has the wrong number of elements");
    }
    if text.starts_with("unknown variant ") || text.starts_with("data did not match any variant") {
        return format!("{field} is not one of the values it takes");
    }
    format!("{field} {text}")
}

/// The name in backquotes after `opening`: serde's "missing field `code`".
fn quoted_after<'a>(text: &'a str, opening: &str) -> Option<&'a str> {
    text.strip_prefix(opening)?.strip_prefix('`')?.split('`').next()
}

/// serde's "expected ..." of the types the API's fields have, in JSON's
/// words; `None` for anything else (a struct's or an enum's name).
fn described(expected: &str) -> Option<&'static str> {
    Some(match expected {
        "u8" | "u16" | "u32" | "u64" | "i8" | "i16" | "i32" | "i64" | "usize" | "isize" | "an integer" => {
            "a whole number"
        }
        "an integer or null" => "a whole number, or null",
        "f32" | "f64" => "a number",
        "a string" | "a borrowed string" | "a character" | "a char" => "a string",
        "a boolean" => "true or false",
        "a sequence" => "a JSON array",
        _ if expected.starts_with("struct ") || expected == "a map" => "a JSON object",
        _ => return None,
    })
}

/// A path segment that does not parse: every path parameter that can fail
/// to parse is an id.
pub(crate) fn explain_path(rejection: &PathRejection) -> String {
    let key = match rejection {
        PathRejection::FailedToDeserializePathParams(err) => match err.kind() {
            ErrorKind::ParseErrorAtKey { key, .. }
            | ErrorKind::DeserializeError { key, .. }
            | ErrorKind::InvalidUtf8InPathParam { key } => Some(camel_case(key)),
            _ => None,
        },
        _ => None,
    };
    let what = key.map_or_else(|| "the id in the path".to_owned(), |key| format!("`{key}` in the path"));
    format!("{what} must be a whole number from 0 to {}", i64::MAX)
}

/// The routes' parameters are snake_case in Rust and camelCase in the API
/// (`voucher_id` is `{voucherId}`).
fn camel_case(key: &str) -> String {
    let mut parts = key.split('_');
    let mut out = parts.next().unwrap_or_default().to_owned();
    for part in parts {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            out.extend(first.to_uppercase());
            out.push_str(chars.as_str());
        }
    }
    out
}

/// A query string that does not read: serde_urlencoded's error says which
/// field is missing or unknown, and nothing else worth repeating.
pub(crate) fn explain_query(rejection: &QueryRejection) -> String {
    let text = rejection.body_text();
    let after = |opening: &str| text.find(opening).and_then(|at| quoted_after(&text[at..], opening));
    if let Some(name) = after("missing field ") {
        return format!("the query parameter `{name}` is required");
    }
    if let Some(name) = after("unknown field ") {
        return format!("`{name}` is not a query parameter of this route");
    }
    "a query parameter has a value it does not take: see the route in /openapi.json".to_owned()
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    #[allow(dead_code)]
    struct Form {
        phone: String,
        pay_type: u8,
        #[serde(default)]
        items: Vec<u32>,
        #[serde(default)]
        inner: Option<Inner>,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        n: u64,
    }

    fn said(body: &str) -> String {
        read_json::<Form>(body.as_bytes()).unwrap_err()
    }

    #[test]
    fn each_kind_of_mistake_is_named_with_its_field_in_the_apis_words() {
        assert_eq!(said(r#"{"payType": 1}"#), "`phone` is required");
        assert_eq!(
            said(r#"{"phone": "1", "payType": 1, "remember": true}"#),
            "`remember` is not a field of this request"
        );
        assert_eq!(said(r#"{"phone": 1, "payType": 1}"#), "`phone` must be a string");
        assert_eq!(said(r#"{"phone": "1", "payType": -1}"#), "`payType` is out of range");
        assert_eq!(said(r#"{"phone": "1", "payType": 1.5}"#), "`payType` must be a whole number");
        assert_eq!(said(r#"{"phone": "1", "payType": 1, "items": [1, "x"]}"#), "`items[1]` must be a whole number");
        assert_eq!(said(r#"{"phone": "1", "payType": 1, "inner": 3}"#), "`inner` must be a JSON object");
        assert_eq!(said(r#"{"phone": "1", "payType": 1, "inner": {"n": true}}"#), "`inner.n` must be a whole number");
        assert_eq!(said(r#"{"phone": "1",}"#), "the body is not valid JSON (line 1, column 15)");
        assert_eq!(said(r#"{"phone": "1""#), "the body is not valid JSON: it ends too early");
        assert_eq!(said(r#"{"phone": "1", "payType": 1} {}"#), "the body holds more than one JSON value");
    }

    #[test]
    fn no_message_repeats_a_librarys_words() {
        for body in [
            r#"{"phone": "1", "payType": 1, "remember": true}"#,
            r#"{"phone": "1", "payType": 300}"#,
            r#"{"phone": "1", "payType": 1, "inner": 3}"#,
            r#"[1]"#,
        ] {
            let said = said(body);
            for internal in ["expected one of", "u8", "u64", "struct", "enum", "Form", "invalid type", "line 1 column"]
            {
                assert!(!said.contains(internal), "{body}: {said}");
            }
        }
    }

    #[test]
    fn a_routes_parameter_is_named_as_the_api_names_it() {
        assert_eq!(camel_case("voucher_id"), "voucherId");
        assert_eq!(camel_case("order_id"), "orderId");
        assert_eq!(camel_case("path"), "path");
    }
}
