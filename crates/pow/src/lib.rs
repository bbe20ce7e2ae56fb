//! The sale path's proof-of-work, in the manner of Hashcash and mCaptcha:
//! a nonce solves a token at `bits` when SHA-256 of the token's UTF-8
//! bytes followed by the nonce in decimal has at least `bits` leading zero
//! bits. The service checks (`solves`) and scales (`difficulty`); clients
//! (the load tool natively, the sale page in a Web Worker) `solve`. A
//! crate of its own so that server and client share one definition.

use sha2::{Digest, Sha256};

/// Leading zero bits of `digest`.
fn leading_zero_bits(digest: &[u8]) -> u32 {
    let mut bits = 0;
    for byte in digest {
        if *byte == 0 {
            bits += 8;
        } else {
            return bits + byte.leading_zeros();
        }
    }
    bits
}

/// Whether `nonce` has the protocol's shape: 1 to 20 decimal digits (a
/// u64 at most, and a bound on the work of checking it).
pub fn is_nonce(nonce: &str) -> bool {
    (1..=20).contains(&nonce.len()) && nonce.bytes().all(|b| b.is_ascii_digit())
}

/// Whether `nonce` (decimal digits, as sent) solves `token` at `bits`.
pub fn solves(token: &str, nonce: &str, bits: u8) -> bool {
    if !is_nonce(nonce) {
        return false;
    }
    let digest = Sha256::new().chain_update(token.as_bytes()).chain_update(nonce.as_bytes()).finalize();
    leading_zero_bits(&digest) >= u32::from(bits)
}

/// The first nonce from 0 that solves `token` at `bits`: what a client
/// does (the sale page in a Web Worker, the load tool natively).
pub fn solve(token: &str, bits: u8) -> u64 {
    let mut prefix = Sha256::new();
    prefix.update(token.as_bytes());
    let mut digits = itoa::Buffer::new();
    (0u64..)
        .find(|nonce| {
            let digest = prefix.clone().chain_update(digits.format(*nonce)).finalize();
            leading_zero_bits(&digest) >= u32::from(bits)
        })
        .expect("a nonce below 2^64 solves any difficulty up to 32 bits")
}

/// The difficulty for `asks` path requests in the last second against
/// `admit_per_second`: `base` while asks stay within the rate, one bit
/// more per doubling past it, at most `max`.
pub fn difficulty(asks: u64, admit_per_second: u32, base: u8, max: u8) -> u8 {
    let rate = u64::from(admit_per_second.max(1));
    if asks <= rate {
        return base;
    }
    // ceil(log2(asks / rate)), in integers.
    let ratio = asks.div_ceil(rate);
    let extra = 64 - (ratio - 1).leading_zeros();
    base.saturating_add(extra.min(32) as u8).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_solved_nonce_passes_and_a_near_miss_does_not() {
        let token = "abc-token";
        let nonce = solve(token, 12);
        assert!(solves(token, &nonce.to_string(), 12));
        // The digest of a found nonce has its bits; the nonces before it
        // did not reach them.
        for miss in 0..nonce {
            assert!(!solves(token, &miss.to_string(), 12), "nonce {miss}");
        }
    }

    #[test]
    fn a_nonce_that_is_not_plain_decimal_never_solves() {
        for nonce in ["", "-1", "1e3", " 1", "0x10", "123456789012345678901"] {
            assert!(!solves("t", nonce, 0), "{nonce:?}");
        }
        assert!(solves("t", "7", 0), "any decimal nonce solves difficulty 0");
    }

    #[test]
    fn the_digest_is_the_token_followed_by_the_decimal_nonce() {
        // What a browser computes: SHA-256("t" + "42"); a digest checked by hand.
        let digest = Sha256::digest(b"t42");
        let bits = leading_zero_bits(&digest) as u8;
        assert!(solves("t", "42", bits));
        assert!(!solves("t", "42", bits + 1));
    }

    #[test]
    fn the_difficulty_adds_a_bit_per_doubling_of_the_asks_past_the_rate() {
        assert_eq!(difficulty(0, 1000, 14, 24), 14);
        assert_eq!(difficulty(1000, 1000, 14, 24), 14);
        assert_eq!(difficulty(1001, 1000, 14, 24), 15);
        assert_eq!(difficulty(2000, 1000, 14, 24), 15);
        assert_eq!(difficulty(4000, 1000, 14, 24), 16);
        assert_eq!(difficulty(4001, 1000, 14, 24), 17);
        assert_eq!(difficulty(u64::MAX, 1, 14, 24), 24, "capped");
    }
}
