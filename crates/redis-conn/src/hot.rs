//! Hot keys as this client sees them: the hash tags that take a large part
//! of their master's commands. A voucher's stock, buyers and stream share
//! its tag, so a voucher whose sale crowds one master shows as one hot tag,
//! whichever of its keys the sale's scripts touch.
//!
//! Cheap and bounded whatever the number of keys:
//!
//! - one command in `sample_every` is looked at (chosen by a hash of a
//!   counter, so that a path which always sends the same few commands in
//!   the same order is not sampled at one of them only); the others cost
//!   one atomic add;
//! - a sampled command's first key gives its tag and slot; the slot's
//!   counter goes up (16,384 of them), and the tag goes into a Space-Saving
//!   list of [`TRACKED`] tags (Metwally, Agrawal and El Abbadi, 2005): a
//!   tag with more than 1/[`TRACKED`] of the samples is surely in it, and
//!   each count is too high by at most the error kept beside it;
//! - every `window` the window closes: each master's total is summed from
//!   its slots, and a tag is hot when its count less its error (never too
//!   early) is at least `share` of its master's, on a master sampled at
//!   least `min_samples` times (a quiet master has nothing to spread).
//!
//! Memory: [`TRACKED`] tags of at most [`MAX_TAG`] bytes, 64 KiB of slot
//! counters and the last window's verdict, about 70 KiB in all.

use std::{
    sync::{
        Arc, Mutex, PoisonError, RwLock,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    time::{Duration, Instant},
};

use redis::{Arg, Cmd, Pipeline};

use crate::{
    Redis,
    slots::{SLOTS, SlotOwners, hash_tag, slot_of_tag},
};

/// Tags followed at once: any tag with more than 1/64 of the samples is
/// among them, so one with a fifth of one master's commands is, on up to
/// twelve masters.
pub const TRACKED: usize = 64;
/// Bytes of a tag kept; a longer one (no voucher's) is cut.
pub const MAX_TAG: usize = 64;
/// Windows between two readings of the slot map (a failover moves slots).
const WINDOWS_PER_SLOT_MAP: u32 = 10;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HotKeySettings {
    /// One command in this many is sampled.
    pub sample_every: u32,
    /// The part of its master's sampled commands that makes a tag hot.
    pub share: f64,
    /// How often a verdict is reached: a tag that turns hot is known
    /// within two windows.
    pub window: Duration,
    /// Samples of a master in a window below which none of its tags is hot.
    pub min_samples: u32,
}

impl Default for HotKeySettings {
    fn default() -> Self {
        Self { sample_every: 8, share: 0.2, window: Duration::from_millis(400), min_samples: 64 }
    }
}

/// A tag found hot in the last window.
#[derive(Debug, Clone, PartialEq)]
pub struct HotKey {
    /// The hash tag (a voucher's id, for its keys), as text.
    pub tag: String,
    /// Its master's `host:port`.
    pub master: String,
    /// Its part of its master's sampled commands in the last window, at
    /// least.
    pub share: f64,
    /// The close of the first window of this run of hot windows.
    pub since: Instant,
}

/// The counts and the last verdict; cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct HotKeys(Arc<Shared>);

struct Shared {
    settings: HotKeySettings,
    window: Mutex<Window>,
    owners: RwLock<Arc<SlotOwners>>,
    hot: RwLock<Arc<[HotKey]>>,
    found: AtomicU64,
}

struct Window {
    top: TopTags,
    per_slot: Box<[u32]>,
}

fn empty_slots() -> Box<[u32]> {
    vec![0; usize::from(SLOTS)].into_boxed_slice()
}

impl HotKeys {
    pub fn new(settings: HotKeySettings) -> Self {
        Self(Arc::new(Shared {
            settings: HotKeySettings {
                sample_every: settings.sample_every.clamp(1, 1 << 20),
                window: settings.window.max(Duration::from_millis(10)),
                ..settings
            },
            window: Mutex::new(Window { top: TopTags::default(), per_slot: empty_slots() }),
            owners: RwLock::new(Arc::new(SlotOwners::single())),
            hot: RwLock::new(Arc::from([])),
            found: AtomicU64::new(0),
        }))
    }

    pub fn settings(&self) -> HotKeySettings {
        self.0.settings
    }

    /// The tags the last window found hot, the hottest first.
    pub fn current(&self) -> Arc<[HotKey]> {
        self.0.hot.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Tags found hot since start, each counted when a run of hot windows
    /// began.
    pub fn found(&self) -> u64 {
        self.0.found.load(Relaxed)
    }

    /// Counts `cmd` as sent: what [`Redis`] does for each command once
    /// [`Redis::count_hot_keys`] gave it this.
    pub fn observe(&self, cmd: &Cmd) {
        thread_local! {
            /// Commands this thread sent: a count of its own, where one
            /// shared by every thread would move between the cores' caches
            /// at each command.
            static SENT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
        }
        let n = SENT.get();
        SENT.set(n.wrapping_add(1));
        // Fibonacci hashing of the counter: one in `sample_every`, in no
        // short period.
        let spread = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
        if spread >= 0x100_0000 / u64::from(self.0.settings.sample_every) {
            return;
        }
        let Some(key) = first_key(cmd) else { return };
        let tag = hash_tag(key);
        let slot = slot_of_tag(tag);
        let mut window = self.0.window.lock().unwrap_or_else(PoisonError::into_inner);
        let count = &mut window.per_slot[usize::from(slot)];
        *count = count.saturating_add(1);
        window.top.add(&tag[..tag.len().min(MAX_TAG)], slot);
    }

    pub(crate) fn observe_pipeline(&self, pipeline: &Pipeline) {
        pipeline.cmd_iter().for_each(|cmd| self.observe(cmd));
    }

    /// Closes the window and keeps what it found. The slot map is the last
    /// one [`watch`](Self::watch) read.
    pub fn close_window(&self) -> Arc<[HotKey]> {
        let fresh = empty_slots();
        let (top, per_slot) = {
            let mut window = self.0.window.lock().unwrap_or_else(PoisonError::into_inner);
            (std::mem::take(&mut window.top), std::mem::replace(&mut window.per_slot, fresh))
        };
        let owners = self.0.owners.read().unwrap_or_else(PoisonError::into_inner).clone();
        let found = self.verdict(&top, &per_slot, &owners, Instant::now());
        *self.0.hot.write().unwrap_or_else(PoisonError::into_inner) = found.clone();
        found
    }

    fn verdict(&self, top: &TopTags, per_slot: &[u32], owners: &SlotOwners, now: Instant) -> Arc<[HotKey]> {
        let settings = self.0.settings;
        let mut totals = vec![0u64; owners.masters()];
        for (slot, count) in per_slot.iter().enumerate().filter(|(_, count)| **count > 0) {
            if let Some(master) = owners.master_of(slot as u16) {
                totals[master] += u64::from(*count);
            }
        }
        let before = self.current();
        let mut hot: Vec<HotKey> = Vec::new();
        for tracked in &top.entries {
            let Some(master) = owners.master_of(tracked.slot) else { continue };
            let total = totals[master];
            let share = f64::from(tracked.count - tracked.error) / total.max(1) as f64;
            if total < u64::from(settings.min_samples) || share < settings.share {
                continue;
            }
            let tag = String::from_utf8_lossy(&tracked.tag).into_owned();
            let master = owners.master_name(master).to_owned();
            let since = before.iter().find(|h| h.tag == tag).map(|h| h.since);
            if since.is_none() {
                self.0.found.fetch_add(1, Relaxed);
                tracing::info!(tag = %shown(&tag), %master, share, "a hot key: this tag takes that share of its master's commands");
            }
            hot.push(HotKey { tag, master, share, since: since.unwrap_or(now) });
        }
        hot.sort_by(|a, b| b.share.total_cmp(&a.share));
        hot.into()
    }

    /// Closes a window every `window` and reads the slot map every ten,
    /// through `redis`, for as long as the caller polls it: the caller
    /// owns the task and stops it by dropping it.
    pub async fn watch(self, mut redis: Redis) {
        let mut ticks = tokio::time::interval(self.0.settings.window);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut closed = 0u32;
        loop {
            if closed.is_multiple_of(WINDOWS_PER_SLOT_MAP) {
                // A map that cannot be read now (a cluster in motion)
                // leaves the last one in place.
                match SlotOwners::try_read(&mut redis).await {
                    Ok(owners) => *self.0.owners.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(owners),
                    Err(err) => tracing::debug!(%err, "CLUSTER NODES failed; hot keys keep the last slot map"),
                }
            }
            ticks.tick().await;
            self.close_window();
            closed = closed.wrapping_add(1);
        }
    }
}

/// A tag as a log shows it: numbers (vouchers, segments, users) whole;
/// anything else by at most its first two words, and only those made of
/// letters alone and followed by another, so that no session id, phone or address (a rate limit's
/// key names them) reaches the log.
fn shown(tag: &str) -> String {
    if tag.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return tag.to_owned();
    }
    // The last word is the key's subject, whatever it looks like.
    let Some((leading, _subject)) = tag.rsplit_once(':') else { return "…".to_owned() };
    let words: Vec<&str> = leading
        .split(':')
        .take(2)
        .take_while(|word| !word.is_empty() && word.bytes().all(|b| b.is_ascii_lowercase() || b == b'-' || b == b'_'))
        .collect();
    words.iter().map(|word| format!("{word}:")).collect::<String>() + "…"
}

/// The key a command is routed by, as a cluster routes it; `None` for a
/// command that names no key.
fn first_key(cmd: &Cmd) -> Option<&[u8]> {
    let mut args = cmd.args_iter().map(|arg| match arg {
        Arg::Simple(bytes) => bytes,
        _ => &[][..],
    });
    let given = args.next()?;
    // The name in capitals, in a buffer of the longest name matched below.
    let mut name = [0u8; 12];
    if given.len() > name.len() {
        return args.next().filter(|key| !key.is_empty());
    }
    name[..given.len()].copy_from_slice(given);
    name.make_ascii_uppercase();
    match &name[..given.len()] {
        b"EVAL" | b"EVALSHA" | b"EVAL_RO" | b"EVALSHA_RO" | b"FCALL" | b"FCALL_RO" => {
            let keys: u64 = std::str::from_utf8(args.nth(1)?).ok()?.parse().ok()?;
            if keys == 0 { None } else { args.next() }
        }
        // A subcommand first, then the key.
        b"XINFO" | b"XGROUP" | b"OBJECT" | b"MEMORY" => args.nth(1).filter(|key| !key.is_empty()),
        b"XREAD" | b"XREADGROUP" => {
            // A read over several streams (one server's consumer reads
            // every voucher's at once) is no one tag's.
            let streams: Vec<&[u8]> = args.skip_while(|arg| !arg.eq_ignore_ascii_case(b"STREAMS")).skip(1).collect();
            if streams.len() == 2 { Some(streams[0]) } else { None }
        }
        b"PING" | b"INFO" | b"CLUSTER" | b"WAIT" | b"WAITAOF" | b"SCRIPT" | b"FUNCTION" | b"CLIENT" | b"HELLO"
        | b"AUTH" | b"SELECT" | b"READONLY" | b"READWRITE" | b"ROLE" | b"CONFIG" | b"TIME" | b"DBSIZE" | b"MULTI"
        | b"EXEC" | b"DISCARD" | b"PUBLISH" | b"SUBSCRIBE" | b"PSUBSCRIBE" | b"UNSUBSCRIBE" | b"PUNSUBSCRIBE"
        | b"SCAN" | b"KEYS" | b"FLUSHDB" | b"FLUSHALL" | b"LATENCY" | b"SLOWLOG" | b"COMMAND" | b"ECHO" | b"QUIT" => {
            None
        }
        _ => args.next().filter(|key| !key.is_empty()),
    }
}

/// The Space-Saving list: counts of the tags seen most, each with the
/// most it may be over.
#[derive(Default)]
struct TopTags {
    entries: Vec<Tracked>,
}

struct Tracked {
    tag: Box<[u8]>,
    slot: u16,
    count: u32,
    error: u32,
}

impl TopTags {
    fn add(&mut self, tag: &[u8], slot: u16) {
        if let Some(tracked) = self.entries.iter_mut().find(|t| *t.tag == *tag) {
            tracked.count = tracked.count.saturating_add(1);
            return;
        }
        let entry = |count: u32| Tracked { tag: tag.into(), slot, count: count.saturating_add(1), error: count };
        if self.entries.len() < TRACKED {
            self.entries.push(entry(0));
        } else if let Some(least) = self.entries.iter_mut().min_by_key(|t| t.count) {
            *least = entry(least.count);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evalsha(key: &str) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg("0123abcd").arg(2).arg(key).arg("other").arg(5);
        cmd
    }

    fn get(key: &str) -> Cmd {
        let mut cmd = redis::cmd("GET");
        cmd.arg(key);
        cmd
    }

    #[test]
    fn a_command_is_counted_under_the_key_a_cluster_routes_it_by() {
        let key = |cmd: &Cmd| first_key(cmd).map(|k| String::from_utf8_lossy(k).into_owned());
        assert_eq!(key(&evalsha("seckill:stock:{7}")).as_deref(), Some("seckill:stock:{7}"));
        let mut no_keys = redis::cmd("EVALSHA");
        no_keys.arg("0123abcd").arg(0).arg("an argument");
        assert_eq!(key(&no_keys), None);
        let mut read = redis::cmd("XREADGROUP");
        read.arg("GROUP")
            .arg("orders")
            .arg("c1")
            .arg("COUNT")
            .arg(10)
            .arg("STREAMS")
            .arg("seckill:orders:{7}")
            .arg(">");
        assert_eq!(key(&read).as_deref(), Some("seckill:orders:{7}"));
        let mut over_two = redis::cmd("XREADGROUP");
        over_two
            .arg("GROUP")
            .arg("orders")
            .arg("c1")
            .arg("STREAMS")
            .arg("seckill:orders:{7}")
            .arg("seckill:orders:{8}");
        over_two.arg(">").arg(">");
        assert_eq!(key(&over_two), None);
        assert_eq!(key(&get("login:token:abc")).as_deref(), Some("login:token:abc"));
        let mut wait = redis::cmd("WAIT");
        wait.arg(1).arg(100);
        assert_eq!(key(&wait), None);
        assert_eq!(key(&redis::cmd("PING")), None);
        let mut groups = redis::cmd("XINFO");
        groups.arg("GROUPS").arg("seckill:orders:{7}");
        assert_eq!(key(&groups).as_deref(), Some("seckill:orders:{7}"));
        let mut create = redis::cmd("XGROUP");
        create.arg("CREATE").arg("seckill:orders:{7}").arg("orders").arg("0").arg("MKSTREAM");
        assert_eq!(key(&create).as_deref(), Some("seckill:orders:{7}"));
    }

    #[test]
    fn one_command_in_sample_every_is_looked_at_in_no_short_period() {
        let hot = HotKeys::new(HotKeySettings { sample_every: 8, ..Default::default() });
        // A path that always sends four commands in the same order: each
        // of them is sampled about as often as the others.
        for i in 0..80_000 {
            hot.observe(&get(&format!("{{{}}}", i % 4)));
        }
        let window = hot.0.window.lock().unwrap();
        let counts: Vec<u32> = window.top.entries.iter().map(|t| t.count).collect();
        assert_eq!(counts.len(), 4, "{counts:?}");
        let total: u32 = counts.iter().sum();
        assert!((9_000..11_000).contains(&total), "80,000 commands gave {total} samples");
        assert!(counts.iter().all(|c| (2_000..3_000).contains(c)), "{counts:?}");
    }

    fn settings() -> HotKeySettings {
        HotKeySettings { sample_every: 1, ..Default::default() }
    }

    #[test]
    fn a_tag_with_a_fifth_of_its_masters_commands_is_hot_and_the_quiet_ones_are_not() {
        let hot = HotKeys::new(settings());
        // Fifty quiet vouchers, twenty commands each, and one with 400.
        for round in 0..20 {
            for voucher in 1..=50 {
                hot.observe(&evalsha(&format!("seckill:stock:{{{voucher}}}")));
            }
            for _ in 0..20 {
                hot.observe(&evalsha("seckill:stock:{99}"));
            }
            hot.observe(&get(&format!("login:token:{round}")));
        }
        let found = hot.close_window();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].tag, "99");
        assert!((0.25..0.30).contains(&found[0].share), "{found:?}");
        assert_eq!(hot.found(), 1);
    }

    #[test]
    fn a_tag_stays_found_once_while_it_stays_hot_and_is_found_again_after_a_quiet_window() {
        let hot = HotKeys::new(settings());
        let busy = |hot: &HotKeys| (0..100).for_each(|_| hot.observe(&get("seckill:stock:{7}")));
        busy(&hot);
        let first = hot.close_window();
        busy(&hot);
        let second = hot.close_window();
        assert_eq!((first.len(), second.len(), hot.found()), (1, 1, 1));
        assert_eq!(first[0].since, second[0].since, "one run of hot windows");
        assert!(hot.close_window().is_empty(), "a window with no commands finds nothing");
        busy(&hot);
        assert_eq!(hot.close_window().len(), 1);
        assert_eq!(hot.found(), 2);
    }

    #[test]
    fn a_tag_that_came_late_is_judged_by_what_was_seen_of_it_not_by_the_count_it_inherited() {
        let hot = HotKeys::new(HotKeySettings { sample_every: 1, share: 0.05, ..Default::default() });
        // The list full of 64 tags seen ten times each; then one more tag,
        // 25 times: it takes the place of one seen ten times and inherits
        // their count as its error, 35 of 665 (5.3 %) by its count, 25
        // (3.8 %) surely seen.
        for tag in 0..64 {
            (0..10).for_each(|_| hot.observe(&get(&format!("{{{tag}}}"))));
        }
        (0..25).for_each(|_| hot.observe(&get("{late}")));
        assert!(hot.close_window().is_empty());
        // Seen that often from the start of a window, it is hot.
        (0..35).for_each(|_| hot.observe(&get("{late}")));
        (0..630).for_each(|i| hot.observe(&get(&format!("{{{}}}", i % 63))));
        assert_eq!(hot.close_window().iter().map(|h| h.tag.as_str()).collect::<Vec<_>>(), ["late"]);
    }

    #[test]
    fn a_quiet_master_has_no_hot_tag() {
        let hot = HotKeys::new(settings());
        (0..63).for_each(|_| hot.observe(&get("seckill:stock:{7}")));
        assert!(hot.close_window().is_empty(), "63 samples are below min_samples");
    }

    #[test]
    fn shares_are_of_the_tags_own_master() {
        let nodes = "\
a 127.0.0.1:7001@17001 master - 0 0 1 connected 0-5460
b 127.0.0.1:7002@17002 master - 0 0 2 connected 5461-10922
c 127.0.0.1:7003@17003 master - 0 0 3 connected 10923-16383
";
        let owners = SlotOwners::from_cluster_nodes(nodes);
        let hot = HotKeys::new(settings());
        *hot.0.owners.write().unwrap() = Arc::new(owners.clone());
        // Tag 7 has 100 of its master's 300 samples; the 900 commands of
        // tags elsewhere do not dilute it.
        let elsewhere: Vec<String> = (1000..)
            .map(|t| t.to_string())
            .filter(|t| owners.master_of(crate::slots::slot(t)) != owners.master_of(crate::slots::slot("7")))
            .take(30)
            .collect();
        let beside: Vec<String> = (2000..)
            .map(|t| t.to_string())
            .filter(|t| owners.master_of(crate::slots::slot(t)) == owners.master_of(crate::slots::slot("7")))
            .take(20)
            .collect();
        (0..100).for_each(|_| hot.observe(&get("{7}")));
        beside.iter().for_each(|t| (0..10).for_each(|_| hot.observe(&get(&format!("{{{t}}}")))));
        elsewhere.iter().for_each(|t| (0..30).for_each(|_| hot.observe(&get(&format!("{{{t}}}")))));
        let found = hot.close_window();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!((found[0].share - 1.0 / 3.0).abs() < 1e-9, "{found:?}");
        assert_eq!(found[0].master, owners.master_name(owners.master_of(crate::slots::slot("7")).unwrap()));
    }

    #[test]
    fn memory_is_bounded_whatever_the_number_of_tags() {
        let hot = HotKeys::new(settings());
        for i in 0..100_000 {
            hot.observe(&get(&format!("{{{i}-{}}}", "x".repeat(200))));
        }
        let window = hot.0.window.lock().unwrap();
        assert_eq!(window.top.entries.len(), TRACKED);
        assert!(window.top.entries.iter().all(|t| t.tag.len() <= MAX_TAG));
    }

    #[test]
    fn a_log_shows_numbers_whole_and_hides_the_rest_of_a_name() {
        assert_eq!(shown("7"), "7");
        assert_eq!(shown("7.1.3"), "7.1.3");
        assert_eq!(shown("login:code:13800000000"), "login:code:…");
        assert_eq!(shown("login:token:secretsession"), "login:token:…");
        assert_eq!(shown("rate:code:phone-addr:13800138000:2001:db8::1"), "rate:code:…");
        assert_eq!(shown("rate:login:addr:10.0.0.7"), "rate:login:…");
        assert_eq!(shown("secret"), "…");
        assert_eq!(shown("a1b2c3:whatever"), "…");
    }
}
