//! Signed tokens: the sale path and the challenge are both a few numbers
//! and an HMAC-SHA256 tag under a key derived from `JWT_SECRET` (so every
//! instance checks what any instance issued), written base64url so they
//! fit a URL segment. Checking one costs a hash, never a round trip: the
//! order route verifies a path without asking Redis, and single use is
//! enforced by the order script or transaction that runs anyway.

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Bytes of the tag kept: 128 bits, beyond any forgery by trial.
const TAG_LEN: usize = 16;
/// What a token says: its kind, a challenge's difficulty, the user, the
/// voucher, when it expires and a random id (what single use is enforced
/// on).
const BODY_LEN: usize = 2 + 8 * 4;

/// What a token is for; a path is never accepted as a challenge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Path = 1,
    Challenge = 2,
}

/// A token's claims once its tag checked out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Claims {
    /// A challenge's difficulty in leading zero bits (0 for a path): signed,
    /// so that a client cannot claim an easier one.
    pub(crate) bits: u8,
    pub(crate) user_id: u64,
    pub(crate) voucher_id: u64,
    /// Epoch ms.
    pub(crate) expires_ms: i64,
    pub(crate) id: u64,
}

/// Why a token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Not one of ours: malformed, forged, of another kind, another user
    /// or another voucher.
    Invalid,
    Expired,
}

/// The key every instance signs and checks tokens with.
#[derive(Clone)]
pub(crate) struct Signer {
    mac: HmacSha256,
}

impl Signer {
    /// Derived from the JWT secret, so that a token of one kind of ours can
    /// never pass for another (a session JWT is no path).
    pub(crate) fn new(secret: &[u8]) -> Self {
        let mut derive = HmacSha256::new_from_slice(secret).expect("HMAC takes a key of any length");
        derive.update(b"hmdp sale path v1");
        let key = derive.finalize().into_bytes();
        Self { mac: HmacSha256::new_from_slice(&key).expect("HMAC takes a key of any length") }
    }

    pub(crate) fn sign(&self, kind: Kind, claims: Claims) -> String {
        let mut bytes = Vec::with_capacity(BODY_LEN + TAG_LEN);
        bytes.push(kind as u8);
        bytes.push(claims.bits);
        bytes.extend_from_slice(&claims.user_id.to_be_bytes());
        bytes.extend_from_slice(&claims.voucher_id.to_be_bytes());
        bytes.extend_from_slice(&claims.expires_ms.to_be_bytes());
        bytes.extend_from_slice(&claims.id.to_be_bytes());
        let mut mac = self.mac.clone();
        mac.update(&bytes);
        bytes.extend_from_slice(&mac.finalize().into_bytes()[..TAG_LEN]);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// The claims of `token` if it is ours, of `kind`, for this user and
    /// voucher and not expired at `now_ms`.
    pub(crate) fn verify(
        &self,
        kind: Kind,
        token: &str,
        user_id: u64,
        voucher_id: u64,
        now_ms: i64,
    ) -> Result<Claims, Refused> {
        // Longer than any token: not decoded at all.
        if token.len() > 2 * (BODY_LEN + TAG_LEN) {
            return Err(Refused::Invalid);
        }
        let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|_| Refused::Invalid)?;
        if bytes.len() != BODY_LEN + TAG_LEN {
            return Err(Refused::Invalid);
        }
        let (body, tag) = bytes.split_at(BODY_LEN);
        let mut mac = self.mac.clone();
        mac.update(body);
        // Constant time: a tag is not found out byte by byte.
        mac.verify_truncated_left(tag).map_err(|_| Refused::Invalid)?;
        let number = |at: usize| u64::from_be_bytes(body[at..at + 8].try_into().expect("8 bytes"));
        let claims = Claims {
            bits: body[1],
            user_id: number(2),
            voucher_id: number(10),
            expires_ms: number(18) as i64,
            id: number(26),
        };
        if body[0] != kind as u8 || claims.user_id != user_id || claims.voucher_id != voucher_id {
            return Err(Refused::Invalid);
        }
        if now_ms >= claims.expires_ms {
            return Err(Refused::Expired);
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> Claims {
        Claims { bits: 0, user_id: 42, voucher_id: 7, expires_ms: 2_000, id: 99 }
    }

    #[test]
    fn a_token_passes_for_its_user_and_voucher_until_it_expires() {
        let signer = Signer::new(b"a secret of some length");
        let token = signer.sign(Kind::Path, claims());
        assert_eq!(signer.verify(Kind::Path, &token, 42, 7, 1_999), Ok(claims()));
        assert_eq!(signer.verify(Kind::Path, &token, 42, 7, 2_000), Err(Refused::Expired));
        assert_eq!(signer.verify(Kind::Path, &token, 43, 7, 0), Err(Refused::Invalid), "another user");
        assert_eq!(signer.verify(Kind::Path, &token, 42, 8, 0), Err(Refused::Invalid), "another voucher");
        assert_eq!(signer.verify(Kind::Challenge, &token, 42, 7, 0), Err(Refused::Invalid), "another kind");
        assert!(token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "fits a URL segment");
    }

    #[test]
    fn a_token_of_another_secret_or_altered_in_any_byte_is_refused() {
        let signer = Signer::new(b"a secret of some length");
        let token = signer.sign(Kind::Path, claims());
        let other = Signer::new(b"another secret entirely");
        assert_eq!(other.verify(Kind::Path, &token, 42, 7, 0), Err(Refused::Invalid));
        let bytes = URL_SAFE_NO_PAD.decode(&token).unwrap();
        for i in 0..bytes.len() {
            let mut altered = bytes.clone();
            altered[i] ^= 1;
            let altered = URL_SAFE_NO_PAD.encode(altered);
            assert_eq!(signer.verify(Kind::Path, &altered, 42, 7, 0), Err(Refused::Invalid), "byte {i}");
        }
        for junk in ["", "path", "%%%", &"A".repeat(10_000)] {
            assert_eq!(signer.verify(Kind::Path, junk, 42, 7, 0), Err(Refused::Invalid));
        }
    }
}
