//! Many logged-in users at once, for load tests: users and sessions are
//! written directly, in batches, in the same format as a login makes them.
//! Thirty thousand logins through the API would take minutes and test
//! nothing but login.

use anyhow::Context;
use rand::{Rng, distr::Alphanumeric};
use sqlx::{MySql, MySqlPool, QueryBuilder};

use super::{
    phone::validate_phone,
    session::{SessionStore, UserProfile},
    token::TokenKeys,
};

const BATCH: usize = 1_000;

#[derive(Debug, Clone)]
pub struct SeededUser {
    pub id: u64,
    pub phone: String,
    pub token: String,
}

/// Users with phones `first_phone .. first_phone + count` (created when
/// missing, reused when present), each with a fresh session and token.
pub async fn seed_users(
    db: &MySqlPool,
    sessions: &SessionStore,
    tokens: &TokenKeys,
    first_phone: u64,
    count: u64,
) -> anyhow::Result<Vec<SeededUser>> {
    let last_phone = first_phone + count.saturating_sub(1);
    for phone in [first_phone, last_phone] {
        validate_phone(&phone.to_string()).map_err(|_| anyhow::anyhow!("{phone} is not a valid phone"))?;
    }
    let mut seeded = Vec::with_capacity(count as usize);
    let mut start = first_phone;
    while start < first_phone + count {
        let end = (start + BATCH as u64).min(first_phone + count);
        let profiles = upsert_batch(db, start, end).await?;
        let session_ids = sessions.create_many(&profiles).await.context("writing sessions")?;
        for ((profile, sid), phone) in profiles.into_iter().zip(session_ids).zip(start..end) {
            let token = tokens.issue(profile.id, &sid)?;
            seeded.push(SeededUser { id: profile.id, phone: phone.to_string(), token });
        }
        start = end;
    }
    Ok(seeded)
}

/// Phones `start..end`: inserted when missing, then read back in phone
/// order (same-length digit strings sort like their numbers).
async fn upsert_batch(db: &MySqlPool, start: u64, end: u64) -> anyhow::Result<Vec<UserProfile>> {
    let mut insert: QueryBuilder<MySql> = QueryBuilder::new("INSERT INTO tb_user (phone, nick_name) ");
    insert.push_values(start..end, |mut row, phone| {
        let nick: String = rand::rng().sample_iter(&Alphanumeric).take(10).map(char::from).collect();
        row.push_bind(phone.to_string()).push_bind(format!("user_{nick}"));
    });
    insert.push(" ON DUPLICATE KEY UPDATE phone = phone");
    insert.build().execute(db).await.context("inserting users")?;
    let profiles = sqlx::query_as::<_, UserProfile>(
        "SELECT id, nick_name, icon FROM tb_user WHERE phone BETWEEN ? AND ? ORDER BY phone",
    )
    .bind(start.to_string())
    .bind((end - 1).to_string())
    .fetch_all(db)
    .await
    .context("reading users back")?;
    anyhow::ensure!(profiles.len() as u64 == end - start, "expected {} users, found {}", end - start, profiles.len());
    Ok(profiles)
}
