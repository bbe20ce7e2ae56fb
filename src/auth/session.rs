//! Sessions live in Redis as `login:token:<sid>` hashes. They are the
//! authority: deleting one (logout) or letting it expire kills every token
//! that names it, whatever the token's own exp says.

use futures::{StreamExt, TryStreamExt};
use hmdp_redis::Redis;
use redis::AsyncCommands;
use uuid::Uuid;

use crate::keys::Keys;

/// Slid on every request by the refresh layer.
pub(super) const SESSION_TTL: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// Session writes in flight at once when many are made (seeding).
const CREATE_CONCURRENCY: usize = 256;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct UserProfile {
    pub id: u64,
    pub nick_name: String,
    pub icon: String,
}

/// Built once at start-up and cloned into each request (a clone shares the
/// multiplexed connection).
#[derive(Clone)]
pub struct SessionStore {
    redis: Redis,
    keys: Keys,
}

impl SessionStore {
    pub fn new(redis: Redis, keys: Keys) -> Self {
        Self { redis, keys }
    }

    /// A new session with a random 122-bit id; returns the id.
    pub async fn create(&self, user: &UserProfile) -> redis::RedisResult<String> {
        let mut ids = self.create_many(std::slice::from_ref(user)).await?;
        Ok(ids.remove(0))
    }

    /// Sessions for many users; returns their ids in order. Each session
    /// is one transaction of its own (a cluster spreads them over slots),
    /// sent concurrently on the multiplexed connection.
    pub async fn create_many(&self, users: &[UserProfile]) -> redis::RedisResult<Vec<String>> {
        let ids: Vec<String> = users.iter().map(|_| Uuid::new_v4().simple().to_string()).collect();
        let mut writes = Vec::with_capacity(users.len());
        for (user, session_id) in users.iter().zip(&ids) {
            let key = self.keys.session(session_id);
            let fields =
                [("id", user.id.to_string()), ("nickName", user.nick_name.clone()), ("icon", user.icon.clone())];
            let mut redis = self.redis.clone();
            writes.push(async move {
                redis::pipe()
                    .atomic()
                    .hset_multiple(&key, &fields)
                    .ignore()
                    .expire(&key, SESSION_TTL.as_secs() as i64)
                    .ignore()
                    .exec_async(&mut redis)
                    .await
            });
        }
        futures::stream::iter(writes).buffer_unordered(CREATE_CONCURRENCY).try_collect::<Vec<()>>().await?;
        Ok(ids)
    }

    /// Loads the session and slides its TTL in one round trip. `None` when
    /// it is gone (logged out, expired) or malformed.
    pub async fn load_and_touch(&self, session_id: &str) -> redis::RedisResult<Option<UserProfile>> {
        let key = self.keys.session(session_id);
        let ((id, nick_name, icon), _touched): (ProfileFields, bool) = redis::pipe()
            .hmget(&key, &["id", "nickName", "icon"])
            .expire(&key, SESSION_TTL.as_secs() as i64)
            .query_async(&mut self.redis.clone())
            .await?;
        Ok(profile_from_fields(id, nick_name, icon))
    }

    pub async fn delete(&self, session_id: &str) -> redis::RedisResult<()> {
        self.redis.clone().del(self.keys.session(session_id)).await
    }
}

/// A session hash's `id`, `nickName` and `icon`, each absent when missing.
type ProfileFields = (Option<String>, Option<String>, Option<String>);

fn profile_from_fields(id: Option<String>, nick_name: Option<String>, icon: Option<String>) -> Option<UserProfile> {
    Some(UserProfile {
        id: id?.parse().ok()?,
        nick_name: nick_name.unwrap_or_default(),
        icon: icon.unwrap_or_default(),
    })
}
