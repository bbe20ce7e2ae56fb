//! The user rows behind logins.

use rand::{Rng, distr::Alphanumeric};
use sqlx::MySqlPool;

use super::session::UserProfile;

const NICK_NAME_PREFIX: &str = "user_";

/// The first login of a phone creates its user. Two first logins racing for
/// one phone both end up with the same row: the UNIQUE phone index decides
/// and the loser's insert turns into a no-op.
pub(super) async fn find_or_create_by_phone(db: &MySqlPool, phone: &str) -> sqlx::Result<UserProfile> {
    if let Some(user) = find_by_phone(db, phone).await? {
        return Ok(user);
    }
    let nick_name: String = std::iter::once(NICK_NAME_PREFIX.to_owned())
        .chain(rand::rng().sample_iter(&Alphanumeric).take(10).map(|b| char::from(b).to_string()))
        .collect();
    sqlx::query("INSERT INTO tb_user (phone, nick_name) VALUES (?, ?) ON DUPLICATE KEY UPDATE phone = phone")
        .bind(phone)
        .bind(&nick_name)
        .execute(db)
        .await?;
    find_by_phone(db, phone).await?.ok_or_else(|| sqlx::Error::RowNotFound)
}

async fn find_by_phone(db: &MySqlPool, phone: &str) -> sqlx::Result<Option<UserProfile>> {
    sqlx::query_as::<_, UserProfile>("SELECT id, nick_name, icon FROM tb_user WHERE phone = ?")
        .bind(phone)
        .fetch_optional(db)
        .await
}
