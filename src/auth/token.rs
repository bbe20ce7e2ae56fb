//! The JWT only names a session; it proves nothing on its own. HS256 is
//! pinned so a token cannot pick its own algorithm (`none`, HS512, ...).

use chrono::Utc;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The JWT outlives the session on purpose: the session in Redis is the
/// authority, the exp only bounds how long a leaked token is worth trying.
const TOKEN_TTL: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    /// The user id, as a string per RFC 7519.
    pub sub: String,
    /// The session in Redis that must still exist for the token to count.
    pub sid: String,
    pub iat: i64,
    pub exp: i64,
}

#[derive(Clone)]
pub struct TokenKeys {
    inner: Arc<Inner>,
}

struct Inner {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
}

impl TokenKeys {
    pub fn new(secret: &[u8]) -> Self {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_required_spec_claims(&["exp", "sub", "iat"]);
        validation.leeway = 5;
        Self {
            inner: Arc::new(Inner {
                encoding: EncodingKey::from_secret(secret),
                decoding: DecodingKey::from_secret(secret),
                validation,
            }),
        }
    }

    pub(crate) fn issue(&self, user_id: u64, session_id: &str) -> jsonwebtoken::errors::Result<String> {
        let iat = Utc::now().timestamp();
        let claims =
            Claims { sub: user_id.to_string(), sid: session_id.to_owned(), iat, exp: iat + TOKEN_TTL.as_secs() as i64 };
        self.sign(&claims)
    }

    /// Signs arbitrary claims; tests use it to make expired tokens.
    pub fn sign(&self, claims: &Claims) -> jsonwebtoken::errors::Result<String> {
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, &self.inner.encoding)
    }

    /// Signature, algorithm and exp; the session check comes after.
    pub fn verify(&self, token: &str) -> jsonwebtoken::errors::Result<Claims> {
        jsonwebtoken::decode::<Claims>(token, &self.inner.decoding, &self.inner.validation).map(|data| data.claims)
    }
}
