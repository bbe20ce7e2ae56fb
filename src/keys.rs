//! The Redis key names of the contract, in one place. A leaf module: the
//! stores and `ids` take a `Keys` without depending on the rest of the app.

use std::sync::Arc;

use crate::recent::RecentIds;

/// A voucher's keys are built once and then shared: an order names eight
/// of them, and building eight strings per order is work for the
/// allocator on the hot path. At most this many vouchers' keys are kept.
const VOUCHER_KEYS_KEPT: usize = 4_096;

/// The Redis key names of the contract, behind one optional prefix so that
/// tests can share a Redis without sharing state.
#[derive(Clone)]
pub struct Keys {
    prefix: Arc<str>,
    vouchers: Arc<RecentIds<Arc<SeckillKeys>>>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

impl Default for Keys {
    fn default() -> Self {
        Self::new("")
    }
}

impl Keys {
    pub fn new(prefix: &str) -> Self {
        Self { prefix: prefix.into(), vouchers: Arc::new(RecentIds::new(VOUCHER_KEYS_KEPT, None)) }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn login_code(&self, phone: &str) -> String {
        format!("{}login:code:{phone}", self.prefix)
    }

    /// Set for 60 s when a code is sent, so one phone cannot be flooded.
    pub fn login_code_cooldown(&self, phone: &str) -> String {
        format!("{}login:code:cooldown:{phone}", self.prefix)
    }

    /// Counts tries against the current code; reset when a new code is
    /// sent, in one transaction with the code: so it takes the code key's
    /// whole name as its hash tag, `{login:code:<phone>}:attempts`, to
    /// share its slot on Redis Cluster. (A test's prefix goes in front as
    /// well, so the key is still found under the prefix.)
    pub fn login_code_attempts(&self, phone: &str) -> String {
        format!("{}{{{}}}:attempts", self.prefix, self.login_code(phone))
    }

    pub fn session(&self, session_id: &str) -> String {
        format!("{}login:token:{session_id}", self.prefix)
    }

    /// `day` is `yyyy:MM:dd`.
    pub(crate) fn order_sequence(&self, day: &str) -> String {
        format!("{}icr:order:{day}", self.prefix)
    }

    /// The replication history (`master_replid`) the day's sequence last
    /// reserved under (`ids`). Reserved in one script with the sequence, so
    /// it takes the sequence key's whole name as its hash tag, as
    /// `login_code_attempts` does.
    pub(crate) fn order_sequence_lineage(&self, day: &str) -> String {
        format!("{}{{{}}}:lineage", self.prefix, self.order_sequence(day))
    }

    /// A rate limit's window counter: `what` is the limit, `subject` whom
    /// it counts (a phone, a client address, a user id).
    pub fn rate(&self, what: &str, subject: &str) -> String {
        format!("{}rate:{what}:{subject}", self.prefix)
    }

    /// An `Idempotency-Key` of `caller` (`user:42`, `admin`): its claim,
    /// then its first answer.
    pub fn idempotency(&self, caller: &str, key: &str) -> String {
        format!("{}idempotency:{caller}:{key}", self.prefix)
    }

    /// The braces are literal: a Redis Cluster hash tag.
    pub fn order_lock(&self, user_id: u64) -> String {
        format!("{}lock:order:{{{user_id}}}", self.prefix)
    }

    /// A guarded voucher's waiting room, under the voucher's hash tag (in
    /// both modes).
    pub fn sale_line(&self, voucher_id: u64) -> LineKeys {
        let key = |what: &str| format!("{}seckill:{what}:{{{voucher_id}}}", self.prefix);
        LineKeys { line: key("line"), seen: key("seen"), admitted: key("admitted"), state: key("admission") }
    }

    /// string: a solved challenge of the voucher, kept until the challenge
    /// expires, so one solution is used once.
    pub(crate) fn challenge_use(&self, voucher_id: u64, challenge_id: u64) -> String {
        format!("{}seckill:challenge:{{{voucher_id}}}:{challenge_id}", self.prefix)
    }

    /// Asynchronous mode, per voucher; every key of one voucher shares the
    /// hash tag `{<voucherId>}`, so one script can touch them all on Redis
    /// Cluster.
    pub fn seckill(&self, voucher_id: u64) -> Arc<SeckillKeys> {
        self.vouchers.get_or_insert_with(voucher_id, || Arc::new(self.seckill_segment(&voucher_id.to_string())))
    }

    /// One segment of a voucher sold in segments: the same keys under the
    /// segment's hash tag. Segment 0's tag is the voucher id, so its keys
    /// are [`Keys::seckill`]'s.
    pub fn seckill_segment(&self, tag: &str) -> SeckillKeys {
        let key = |what: &str| format!("{}seckill:{what}:{{{tag}}}", self.prefix);
        SeckillKeys {
            stock: key("stock"),
            window: key("voucher"),
            buyers: key("buyers"),
            orders: key("orders"),
            dead: key("dead"),
            pending: key("pending"),
            failed: key("failed"),
            holders: key("holders"),
            lent: key("lent"),
            received: key("received"),
            path_use: format!("{}seckill:path:{{{tag}}}:", self.prefix),
        }
    }

    /// A dead-lettered order's voucher, so its `FAILED` is found after the
    /// sale left `seckill:active`; kept as long as the failed hash.
    pub(crate) fn failed_order(&self, order_id: i64) -> String {
        format!("{}seckill:failed-order:{order_id}", self.prefix)
    }

    /// Who is splitting a hot voucher into segments (`SET NX PX`): one
    /// instance at a time does the work, though each step is safe twice.
    pub(crate) fn seckill_split(&self, voucher_id: u64) -> String {
        format!("{}seckill:split:{{{voucher_id}}}", self.prefix)
    }

    /// The voucher ids whose streams the consumers read.
    pub fn seckill_active(&self) -> String {
        format!("{}seckill:active", self.prefix)
    }
}

/// A guarded voucher's waiting room (`lua/sale_line.lua`).
#[derive(Debug, Clone)]
pub struct LineKeys {
    /// zset: user -> arrival number, the buyers waiting, first first.
    pub line: String,
    /// zset: user -> when they last asked (ms); who stops asking leaves.
    pub seen: String,
    /// zset: user -> until when (ms) their admission lets them have a path.
    pub admitted: String,
    /// hash: the admissions saved up (`tokens`, `at`), the arrival count and
    /// the path requests of this second and the last.
    pub state: String,
}

/// The Redis keys of one voucher in the asynchronous mode.
#[derive(Debug, Clone)]
pub struct SeckillKeys {
    /// string: stock left in Redis.
    pub stock: String,
    /// hash: the sale window, `begin` and `end` in epoch ms.
    pub window: String,
    /// set: the users holding an order, plus the member `0` (no user has id
    /// 0) that marks the set as loaded: an empty set does not exist in
    /// Redis, so without it a lost set would look like "no buyers yet".
    pub buyers: String,
    /// stream, group `orders`: accepted orders awaiting persistence.
    pub orders: String,
    /// stream: orders that could not be persisted, after compensation.
    pub dead: String,
    /// hash: order id -> `<userId>:<ts ms>` of every accepted order not yet
    /// persisted nor dead-lettered; what makes an order `PENDING`.
    pub pending: String,
    /// hash: order id -> `<userId>:<ts ms>` of the dead-lettered orders;
    /// what makes an order `FAILED`.
    pub failed: String,
    /// hash: user id -> order id of every pending order, so a user's
    /// pending order is found by user (`DUPLICATE_ORDER` names it, `/mine`
    /// lists it) without reading the whole pending hash.
    pub holders: String,
    /// hash, segmented vouchers only: borrow id -> `<borrower>:<units>:<ms>:<epoch>`
    /// for units this segment lent that are still in flight, `moves`, a
    /// count of lends, and `epoch`, renewed whenever the stock is set from
    /// MariaDB (`hmdp_segments`).
    pub lent: String,
    /// hash, segmented vouchers only: borrow id -> 1 credited, 0 void, for
    /// borrows into this segment.
    pub received: String,
    /// What a sale path's use key starts with (`path_use`).
    path_use: String,
}

impl SeckillKeys {
    /// string: the order a guarded voucher's sale path `path_id` placed,
    /// kept until the path expires (guarded vouchers only).
    pub(crate) fn path_use(&self, path_id: u64) -> String {
        format!("{}{path_id}", self.path_use)
    }

    /// Every key of the voucher, in the order the scripts that touch them
    /// all take them (`KEYS[1..8]`): the stale-key delete, the load
    /// script's wipe and retirement. The first six are the sale's working
    /// keys, the last two (failed orders, dead letters) outlive them.
    pub fn all(&self) -> [&str; 8] {
        [&self.stock, &self.window, &self.buyers, &self.orders, &self.pending, &self.holders, &self.failed, &self.dead]
    }

    /// The keys a segment's borrowing adds (absent for a voucher of one
    /// segment).
    pub fn borrowing(&self) -> [&str; 2] {
        [&self.lent, &self.received]
    }
}

#[cfg(test)]
mod tests {
    use super::Keys;

    #[test]
    fn a_vouchers_keys_are_built_once_and_share_its_hash_tag() {
        let keys = Keys::new("t:");
        let first = keys.seckill(42);
        assert!(std::sync::Arc::ptr_eq(&first, &keys.seckill(42)), "built once, then shared");
        assert!(first.all().iter().all(|key| key.starts_with("t:seckill:") && key.ends_with(":{42}")));
        let distinct: std::collections::HashSet<&str> = first.all().into_iter().collect();
        assert_eq!(distinct.len(), 8);
        assert_eq!(keys.seckill(43).stock, "t:seckill:stock:{43}");
    }

    #[test]
    fn the_sequence_and_its_lineage_share_a_slot() {
        let keys = Keys::new("t:");
        let (sequence, lineage) = (keys.order_sequence("2026:11:22"), keys.order_sequence_lineage("2026:11:22"));
        assert_eq!(lineage, "t:{t:icr:order:2026:11:22}:lineage");
        assert_eq!(redis::cluster_routing::Slot::for_key(&sequence), redis::cluster_routing::Slot::for_key(&lineage));
    }

    #[test]
    fn the_code_attempts_take_the_code_key_as_their_hash_tag() {
        assert_eq!(Keys::new("").login_code_attempts("13800000000"), "{login:code:13800000000}:attempts");
        assert_eq!(Keys::new("t:").login_code_attempts("13800000000"), "t:{t:login:code:13800000000}:attempts");
    }
}
