//! The phone numbers the service accepts.

use crate::errors::{Coded, ErrorCode};

/// Not a phone number the service accepts; answered 400 with this text.
#[derive(Debug, thiserror::Error)]
#[error("phone must be 11 digits like 13800000000")]
pub(crate) struct InvalidPhone;

impl Coded for InvalidPhone {
    fn code(&self) -> ErrorCode {
        ErrorCode::Validation
    }
}

/// Mainland mobile numbers: `^1[3-9]\d{9}$`.
pub(crate) fn validate_phone(phone: &str) -> Result<&str, InvalidPhone> {
    let b = phone.as_bytes();
    let ok = b.len() == 11 && b[0] == b'1' && (b'3'..=b'9').contains(&b[1]) && b.iter().all(u8::is_ascii_digit);
    if ok { Ok(phone) } else { Err(InvalidPhone) }
}

#[cfg(test)]
mod tests {
    use super::validate_phone;

    #[test]
    fn phones_follow_the_mainland_mobile_pattern() {
        assert!(validate_phone("13800000000").is_ok());
        assert!(validate_phone("19999999999").is_ok());
        for bad in
            ["", "12800000000", "1380000000", "138000000000", "1380000000a", "+8613800000", "２３８００００００００"]
        {
            assert!(validate_phone(bad).is_err(), "{bad:?} accepted");
        }
    }
}
