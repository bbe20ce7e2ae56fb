//! The proof-of-work challenge, in the manner of mCaptcha and Hashcash: the
//! server signs a random token with a difficulty in bits; a nonce solves it
//! when SHA-256 of the token's UTF-8 bytes followed by the nonce in
//! decimal has at least that many leading zero bits. Checking a solution
//! costs one hash and no state (the token is signed and carries its
//! difficulty and expiry); single use is one `SET NX` in the line's
//! script. The difficulty rises with the load: each doubling of the path
//! requests of the last second past the admission rate adds a bit, so a
//! person pays a fraction of a second when the sale is calm and a bot farm
//! pays for every attempt when it is not.

pub(super) use hmdp_pow::{difficulty, solves};
