//! Integers in JSON bodies as JSON Schema counts them: `2.0` is the integer
//! 2 (a number whose fraction is zero), so a client that writes every
//! number as a float, as JavaScript's and Python's serialisers may, is not
//! refused what the OpenAPI document promises to take. A fraction, a value
//! out of the field's range, or any other type is still refused (400).
//! Used with `#[serde(deserialize_with = "whole::number")]`.

use std::fmt;

use serde::{
    Deserializer,
    de::{Error, Visitor},
};

struct Whole;

impl Visitor<'_> for Whole {
    type Value = i128;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an integer")
    }

    fn visit_i64<E: Error>(self, v: i64) -> Result<i128, E> {
        Ok(v.into())
    }

    fn visit_u64<E: Error>(self, v: u64) -> Result<i128, E> {
        Ok(v.into())
    }

    fn visit_f64<E: Error>(self, v: f64) -> Result<i128, E> {
        // Beyond 2^64 no field here can hold it anyway.
        if v.is_finite() && v.fract() == 0.0 && v.abs() < 1.9e19 {
            Ok(v as i128)
        } else {
            Err(E::invalid_value(serde::de::Unexpected::Float(v), &self))
        }
    }
}

fn in_range<T: TryFrom<i128>, E: Error>(v: i128) -> Result<T, E> {
    // In the API's words: `malformed.rs` puts the field's name before it.
    T::try_from(v).map_err(|_| E::custom("is out of range"))
}

pub(crate) fn number<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<i128>,
{
    in_range(deserializer.deserialize_any(Whole)?)
}

/// The same for an optional field (absent or `null` is `None`).
pub(crate) fn optional<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<i128>,
{
    struct Maybe;
    impl<'de> Visitor<'de> for Maybe {
        type Value = Option<i128>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an integer or null")
        }

        fn visit_none<E: Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E: Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(Whole).map(Some)
        }
    }
    deserializer.deserialize_option(Maybe)?.map(in_range).transpose()
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    struct Form {
        #[serde(deserialize_with = "super::number")]
        small: u8,
        #[serde(default, deserialize_with = "super::optional")]
        maybe: Option<i64>,
    }

    fn parse(json: &str) -> Result<Form, serde_json::Error> {
        serde_json::from_str(json)
    }

    #[test]
    fn an_integer_written_as_a_float_is_that_integer() {
        let form = parse(r#"{"small": 2.0, "maybe": -7.0}"#).unwrap();
        assert_eq!((form.small, form.maybe), (2, Some(-7)));
        assert_eq!(parse(r#"{"small": 3}"#).unwrap().maybe, None);
        assert_eq!(parse(r#"{"small": 3, "maybe": null}"#).unwrap().maybe, None);
    }

    #[test]
    fn a_fraction_a_value_out_of_range_or_another_type_is_refused() {
        for bad in
            [r#"{"small": 2.5}"#, r#"{"small": 256}"#, r#"{"small": -1.0}"#, r#"{"small": "2"}"#, r#"{"small": 1e300}"#]
        {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(parse(r#"{"small": 1, "maybe": 0.5}"#).is_err());
    }
}
