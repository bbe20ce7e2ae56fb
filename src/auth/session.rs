//! Sessions live in Redis as `login:token:<sid>` hashes. They are the
//! authority: deleting one (logout) or letting it expire kills every token
//! that names it, whatever the token's own exp says.

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use hmdp_redis::Redis;
use redis::AsyncCommands;
use uuid::Uuid;

use crate::{keys::Keys, recent::RecentIds};

/// Slid by the refresh layer on a user's requests.
pub(super) const SESSION_TTL: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// A session is slid at most this often by one instance: a busy user's
/// requests read it, but only the first in a minute writes its TTL again. A
/// session so left lives at least `SESSION_TTL` minus this after its last
/// request. Logout is not delayed: every request still reads the session.
const SLIDE_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Sessions one instance remembers having slid; past this it forgets them
/// all, and they are slid again.
const SLID_REMEMBERED: usize = 200_000;

/// Session writes in flight at once when many are made (seeding).
const CREATE_CONCURRENCY: usize = 256;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct UserProfile {
    pub(crate) id: u64,
    pub(crate) nick_name: String,
    pub(crate) icon: String,
}

/// Built once at start-up and cloned into each request (a clone shares the
/// multiplexed connection).
#[derive(Clone)]
pub struct SessionStore {
    redis: Redis,
    keys: Keys,
    /// Sessions slid within `SLIDE_EVERY`, by a hash of their id.
    slid: Arc<RecentIds>,
}

impl SessionStore {
    pub fn new(redis: Redis, keys: Keys) -> Self {
        Self { redis, keys, slid: Arc::new(RecentIds::new(SLID_REMEMBERED, Some(SLIDE_EVERY))) }
    }

    /// A new session with a random 122-bit id; returns the id.
    pub(crate) async fn create(&self, user: &UserProfile) -> redis::RedisResult<String> {
        let mut ids = self.create_many(std::slice::from_ref(user)).await?;
        Ok(ids.remove(0))
    }

    /// Sessions for many users; returns their ids in order. Each session
    /// is one transaction of its own (a cluster spreads them over slots),
    /// sent concurrently on the multiplexed connection.
    pub(crate) async fn create_many(&self, users: &[UserProfile]) -> redis::RedisResult<Vec<String>> {
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

    /// Loads the session and, unless this instance did so within
    /// `SLIDE_EVERY`, slides its TTL in the same round trip. `None` when it
    /// is gone (logged out, expired) or malformed.
    pub(crate) async fn load_and_touch(&self, session_id: &str) -> redis::RedisResult<Option<UserProfile>> {
        let key = self.keys.session(session_id);
        let slid = session_hash(session_id);
        let fields = ["id", "nickName", "icon"];
        let (id, nick_name, icon): ProfileFields = if self.slid.contains(slid) {
            self.redis.clone().hmget(&key, &fields).await?
        } else {
            let (profile, _touched): (ProfileFields, bool) = redis::pipe()
                .hmget(&key, &fields)
                .expire(&key, SESSION_TTL.as_secs() as i64)
                .query_async(&mut self.redis.clone())
                .await?;
            self.slid.insert(slid, ());
            profile
        };
        Ok(profile_from_fields(id, nick_name, icon))
    }

    pub(crate) async fn delete(&self, session_id: &str) -> redis::RedisResult<()> {
        self.redis.clone().del(self.keys.session(session_id)).await
    }
}

/// The memory of slid sessions is keyed by u64: a hash of the id. Two
/// sessions sharing one only make one of them slide a minute later.
fn session_hash(session_id: &str) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one(session_id)
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
