//! A voucher found hot during its sale is split into segments while it
//! sells (asynchronous mode), with nobody to set it: every unit sells
//! once, nobody hears sold out while units remain, one order per buyer
//! holds across the split, and an instance that still routes by the old
//! segments is turned round by the order script. A voucher whose admin
//! chose its segments keeps them; a split whose splitter died is finished
//! by the next buyer who meets it; an instance that has not heard of a
//! split sets Redis's stock from the row over the segments the row
//! records, never the ones it remembers. (In `scripts/check-stack`'s Cluster
//! pass the new segments sit on the other masters.)

use hmdp_test_support as common;

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use common::{OrderPath, TestApp, tally};
use futures::StreamExt;
use redis::AsyncCommands;

/// Segments a hot voucher is split into here: on one Redis, "one per
/// master" would be one.
const SPLIT_INTO: u8 = 4;

/// An instance that splits a voucher taking a tenth of its master's
/// commands (on one Redis a sale's order scripts are about a fifth of them:
/// every buyer's session and the consumer's reads share the master, the
/// default's edge), counting every command: a test's sale, slowed by the
/// others running beside it, is far below the 1,280 commands a second a
/// master needs to be judged when one in eight is counted.
fn splitting(c: &mut hmdp::config::Config) {
    c.hot_keys.split_segments = SPLIT_INTO;
    c.hot_keys.percent = 10;
    c.hot_keys.sample_every = 1;
}

async fn splitting_app() -> TestApp {
    TestApp::spawn_on_with(OrderPath::Async, splitting).await
}

/// Drained, Redis's segments adding up to MariaDB's row, every unit sold
/// once to distinct buyers.
async fn audited(app: &TestApp, voucher: u64, sold: i64) {
    let report = app.drained(voucher, Duration::from_secs(30)).await;
    assert!(report.agrees(), "{}", report.render());
    assert_eq!(report.redis_stock, Some(0), "{}", report.render());
    assert_eq!(app.stock_of(voucher).await, 0);
    assert_eq!(app.orders_of(voucher).await, (sold, sold), "one order per buyer, one row per unit");
}

/// Units a segment got by borrowing: the split's segments start with none,
/// so units sold there were borrowed first.
async fn borrowed_into(app: &TestApp, tag: &str) -> usize {
    let received = app.keys.seckill_segment(tag).received;
    app.redis.clone().hlen(&received).await.unwrap()
}

/// What the instances tell each other (`seckill:news:*`), each with when
/// it was heard (Unix ms), as any instance hears it.
async fn overhear(app: &TestApp) -> Arc<Mutex<Vec<(String, i64)>>> {
    let heard = Arc::new(Mutex::new(Vec::new()));
    let client = app.redis.endpoint().subscribe_clients().remove(0);
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub.psubscribe(format!("{}seckill:news:*", app.keys.prefix())).await.unwrap();
    let mut messages = pubsub.into_on_message();
    let prefix = format!("{}seckill:news:", app.keys.prefix());
    tokio::spawn({
        let heard = heard.clone();
        async move {
            while let Some(msg) = messages.next().await {
                let told = msg.get_channel_name().trim_start_matches(&prefix).to_owned();
                heard.lock().unwrap().push((told, chrono::Utc::now().timestamp_millis()));
            }
        }
    });
    heard
}

/// One order per token, half through each instance, at once.
async fn wave(app: &TestApp, peer: &TestApp, voucher: u64, tokens: &[&str]) -> Vec<common::Outcome> {
    let (here, there) = tokens.split_at(tokens.len() / 2);
    let (a, b) = tokio::join!(app.order_all(voucher, here), peer.order_all(voucher, there));
    [a, b].concat()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_voucher_found_hot_is_split_while_two_instances_sell_it_and_every_unit_sells_once() {
    let app = splitting_app().await;
    // The peer splits nothing itself: it routes by the old segment until
    // it is told of the split, or the order script turns an order round.
    let peer = app.spawn_peer(|c| c.hot_keys.split_segments = 1).await;
    let heard = overhear(&app).await;
    let voucher = app.open_seckill(2_000).await;
    let users = app.seed_users(3_000).await;
    let tokens: Vec<&str> = users.iter().map(|(_, token)| token.as_str()).collect();
    // Two waves of 1,500, each half on either instance: the first makes
    // the voucher hot and buys 1,500 of the 2,000 units, and whenever the
    // split lands (during that wave or just after it) units remain for
    // the second, which finds the new segments empty and borrows.
    app.past_the_setups_hot_key_window().await;
    let first = wave(&app, &peer, voucher, &tokens[..1_500]).await;
    let window = app.keys.seckill(voucher).window.clone();
    let mut opened: Option<i64> = None;
    for _ in 0..100 {
        opened = app.redis.clone().hget(&window, "split_opened_at").await.unwrap();
        if opened.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let opened_at = opened.expect("the voucher was split within 5 s of its first wave");
    let second = wave(&app, &peer, voucher, &tokens[1_500..]).await;
    // Nobody hears sold out while any unit is left, and nobody hears
    // anything but OK or SOLD_OUT.
    assert_eq!(tally(&first), BTreeMap::from([("OK".to_owned(), 1_500)]));
    assert_eq!(tally(&second), BTreeMap::from([("OK".to_owned(), 500), ("SOLD_OUT".to_owned(), 1_000)]));

    let tags = app.segment_tags(voucher).await;
    assert_eq!(tags.len(), usize::from(SPLIT_INTO), "split while it sold: {tags:?}");
    let mut borrowed = 0;
    for tag in &tags[1..] {
        borrowed += borrowed_into(&app, tag).await;
    }
    assert!(borrowed > 0, "the new segments sold units they borrowed from segment 0");
    // Every instance is told within 250 ms of the new segments opening,
    // and of the sell-out.
    let heard = heard.lock().unwrap().clone();
    let told_split = heard.iter().find(|(told, _)| *told == format!("split:{voucher}"));
    let (_, at) = told_split.unwrap_or_else(|| panic!("the split was told: {heard:?}"));
    assert!(at - opened_at < 250, "told {} ms after the segments opened", at - opened_at);
    assert!(heard.iter().any(|(told, _)| *told == format!("soldout:{voucher}")), "{heard:?}");
    audited(&app, voucher, 2_000).await;
    // The recorder is the process's: other tests' splits count too.
    let metrics = app.get("/metrics", None).await.text().await.unwrap();
    let splits: f64 = metrics
        .lines()
        .find_map(|line| line.strip_prefix("hmdp_hot_splits_total{outcome=\"split\"} "))
        .and_then(|value| value.parse().ok())
        .unwrap_or(0.0);
    assert!(splits >= 1.0, "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_voucher_whose_admin_chose_one_segment_stays_in_one_however_hot() {
    let app = splitting_app().await;
    let voucher = app.open_seckill_in_segments(1_500, 1).await;
    let users = app.seed_users(2_000).await;
    let tokens: Vec<&str> = users.iter().map(|(_, token)| token.as_str()).collect();
    app.past_the_setups_hot_key_window().await;
    let outcomes = app.order_all(voucher, &tokens).await;
    assert_eq!(tally(&outcomes), BTreeMap::from([("OK".to_owned(), 1_500), ("SOLD_OUT".to_owned(), 500)]));
    // The verdict comes when the sampling window closes: a sale quicker
    // than a window has ended before it (the process alone, as nextest
    // runs it). The segments are read two windows after the verdict,
    // when the splitter, which looks once a window, would have split.
    for _ in 0..40 {
        if app.state.hot_keys.found() >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(app.state.hot_keys.found() >= 1, "found hot all the same, within 2 s of the sale");
    tokio::time::sleep(2 * app.state.hot_keys.settings().window).await;
    assert_eq!(app.segment_tags(voucher).await, vec![voucher.to_string()]);
    audited(&app, voucher, 1_500).await;
}

/// How far a splitter got before it died.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
enum DiedAfter {
    /// The new segments made, closed.
    MakingSegments,
    /// And the row names them.
    RecordingThem,
    /// And segment 0 refuses the old layout; its earlier buyers not moved.
    ClosingSegmentZero,
}

/// The state a splitter leaves when it dies after `step`, at the tags a
/// splitter chooses (on a cluster, one master each while there are).
async fn a_split_abandoned(app: &TestApp, voucher: u64, step: DiedAfter) -> Vec<String> {
    let mut redis = app.redis.clone();
    let owners = hmdp_segments::SlotOwners::read(&mut redis).await;
    let tags = hmdp_segments::choose_tags(voucher, usize::from(SPLIT_INTO), &owners);
    let zero = app.keys.seckill_segment(&tags[0]);
    let window: Vec<(String, String)> = redis.hgetall(&zero.window).await.unwrap();
    for tag in &tags[1..] {
        let segment = app.keys.seckill_segment(tag);
        // Not segment 0's `lineage` either: a segment's load records its own
        // master's, and on a cluster segment 0's there read as a failover
        // (its stock learnt again from MariaDB in the middle of the split).
        let mut closed: Vec<(String, String)> =
            window.iter().filter(|(field, _)| field != "layout" && field != "lineage").cloned().collect();
        closed.push(("layout".into(), "0".into()));
        let _: () = redis.hset_multiple(&segment.window, &closed).await.unwrap();
        let _: () = redis.set(&segment.stock, 0).await.unwrap();
        let _: () = redis.sadd(&segment.buyers, 0).await.unwrap();
        let _: () = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&segment.orders)
            .arg("orders")
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut redis)
            .await
            .unwrap();
    }
    if step >= DiedAfter::RecordingThem {
        sqlx::query("UPDATE tb_seckill_voucher SET segments = ?, segment_tags = ? WHERE voucher_id = ?")
            .bind(SPLIT_INTO)
            .bind(tags[1..].join(","))
            .bind(voucher)
            .execute(&app.db)
            .await
            .unwrap();
    }
    if step >= DiedAfter::ClosingSegmentZero {
        let _: () = redis.hset(&zero.window, "layout", SPLIT_INTO).await.unwrap();
    }
    tags
}

/// Every segment of `tags` serves the new layout, within 5 s.
async fn opened(app: &TestApp, tags: &[String]) -> bool {
    for _ in 0..100 {
        let mut open = true;
        for tag in tags {
            let window = app.keys.seckill_segment(tag).window;
            let layout: Option<String> = app.redis.clone().hget(window, "layout").await.unwrap();
            open &= layout.as_deref() == Some("4");
        }
        if open {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_split_whose_splitter_died_at_any_step_is_finished_and_nobody_buys_twice() {
    // The early buyers go through an instance that counts nothing, and no
    // instance that counts runs until the abandoned split is in place: a
    // splitter's own consumers, persisting the early orders, could make
    // the voucher hot on a cluster's master and split it first.
    let quiet = TestApp::spawn_on_with(OrderPath::Async, |c| {
        splitting(c);
        c.hot_keys.percent = 0;
    })
    .await;
    let users = quiet.seed_users(1_200).await;
    let tokens: Vec<&str> = users.iter().map(|(_, token)| token.as_str()).collect();
    // 100 buy before the split, in segment 0; most of them belong to
    // another segment of four.
    let moved = users[..100].iter().filter(|(user, _)| hmdp_segments::route(*user, 4) != 0).count();
    assert!(moved > 50, "{moved} of the early buyers belong to another segment after the split");
    for step in [DiedAfter::MakingSegments, DiedAfter::RecordingThem, DiedAfter::ClosingSegmentZero] {
        let voucher = quiet.open_seckill(1_000).await;
        let early = quiet.order_all(voucher, &tokens[..100]).await;
        assert_eq!(tally(&early), BTreeMap::from([("OK".to_owned(), 100)]), "{step:?}");
        let tags = a_split_abandoned(&quiet, voucher, step).await;

        // A crowd comes back through an instance that splits, the early
        // buyers among it: the voucher is hot, and whoever meets the split
        // finishes it (that instance's splitter, or a buyer at a closed
        // segment).
        let mut app = quiet.spawn_peer(splitting).await;
        app.past_the_setups_hot_key_window().await;
        let crowd = app.order_all(voucher, &tokens[..600]).await;
        let (again, late) = crowd.split_at(100);
        assert_eq!(tally(again), BTreeMap::from([("DUPLICATE_ORDER".to_owned(), 100)]), "{step:?}: nobody buys twice");
        assert_eq!(tally(late), BTreeMap::from([("OK".to_owned(), 500)]), "{step:?}");
        assert!(opened(&app, &tags).await, "{step:?}: every segment open at the new layout");
        // After it, the early buyers (most of them moved to another
        // segment) still hold their one order, and the rest sells.
        let last: Vec<&str> = tokens[..100].iter().chain(&tokens[600..]).copied().collect();
        let outcomes = app.order_all(voucher, &last).await;
        let (again, late) = outcomes.split_at(100);
        assert_eq!(tally(again), BTreeMap::from([("DUPLICATE_ORDER".to_owned(), 100)]), "{step:?}: nobody buys twice");
        assert_eq!(tally(late), BTreeMap::from([("OK".to_owned(), 400), ("SOLD_OUT".to_owned(), 200)]), "{step:?}");
        audited(&app, voucher, 1_000).await;
        app.stop().await;
    }
}

/// The split a splitter finished up to its news: the row names the new
/// segments, segment 0 refuses the old layout, each new segment holds its
/// share of segment 0's units (lent as a split lends them) and is open;
/// nobody is told. Segment 0's buyers (their orders persisted) are where
/// the new layout routes them.
async fn a_split_opened_unheard(app: &TestApp, voucher: u64) -> Vec<String> {
    let tags = a_split_abandoned(app, voucher, DiedAfter::ClosingSegmentZero).await;
    let mut redis = app.redis.clone();
    let zero = app.keys.seckill_segment(&tags[0]).buyers;
    let buyers: Vec<u64> = redis.smembers(&zero).await.unwrap();
    for user in buyers.into_iter().filter(|user| *user != 0) {
        let segment = hmdp_segments::route(user, tags.len());
        if segment != 0 {
            let _: () = redis.sadd(app.keys.seckill_segment(&tags[segment]).buyers, user).await.unwrap();
            let _: () = redis.srem(&zero, user).await.unwrap();
        }
    }
    let segments: Vec<hmdp_segments::SegmentKeys> = tags
        .iter()
        .map(|tag| {
            let sk = app.keys.seckill_segment(tag);
            hmdp_segments::SegmentKeys { stock: sk.stock, buyers: sk.buyers, lent: sk.lent, received: sk.received }
        })
        .collect();
    let epoch: Option<String> = redis.hget(&segments[0].lent, hmdp_segments::EPOCH).await.unwrap();
    for segment in &segments[1..] {
        if let Some(epoch) = &epoch {
            let _: () = redis.hset_nx(&segment.lent, hmdp_segments::EPOCH, epoch).await.unwrap();
        }
    }
    let left: i64 = redis.get(&segments[0].stock).await.unwrap();
    let stock = hmdp_segments::SegmentedStock::new(redis.clone(), segments);
    for segment in 1..tags.len() {
        let borrow = stock.lend(0, segment, left / tags.len() as i64).await.unwrap().expect("segment 0 lends");
        assert!(stock.complete(&borrow).await.unwrap(), "the share lands");
    }
    for tag in &tags[1..] {
        let _: () = redis.hset(app.keys.seckill_segment(tag).window, "layout", SPLIT_INTO).await.unwrap();
    }
    tags
}

/// Units left in Redis over the segments of `tags`.
async fn units_in(app: &TestApp, tags: &[String]) -> i64 {
    let mut units = 0;
    for tag in tags {
        let left: Option<i64> = app.redis.clone().get(app.keys.seckill_segment(tag).stock).await.unwrap();
        units += left.unwrap_or(0);
    }
    units
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stock_set_from_the_row_by_an_instance_that_has_not_heard_of_a_split_counts_every_unit_once() {
    // It reads the voucher's one segment before the split and hears
    // nothing of it: the row, read under its lock, tells it.
    let unheard = TestApp::spawn_on_with(OrderPath::Async, |c| {
        splitting(c);
        c.hot_keys.percent = 0;
    })
    .await;
    let users = unheard.seed_users(900).await;
    let tokens: Vec<&str> = users.iter().map(|(_, token)| token.as_str()).collect();
    let voucher = unheard.open_seckill(1_000).await;
    let early = unheard.order_all(voucher, &tokens[..100]).await;
    assert_eq!(tally(&early), BTreeMap::from([("OK".to_owned(), 100)]));
    let report = unheard.drained(voucher, Duration::from_secs(30)).await;
    assert!(report.agrees(), "{}", report.render());
    let tags = a_split_opened_unheard(&unheard, voucher).await;
    assert_eq!(units_in(&unheard, &tags).await, 900, "the split moved units, made none");
    assert!(units_in(&unheard, &tags[1..]).await > 0, "the new segments hold units lent by segment 0");

    let set = unheard.set_stock(voucher, serde_json::json!(500)).await;
    assert_eq!(set.status(), 200);
    assert_eq!(unheard.stock_of(voucher).await, 500);
    assert_eq!(units_in(&unheard, &tags).await, 500, "Redis's segments hold the row's units, each once");

    // A crowd through an instance that knows the split buys exactly those.
    let mut peer = unheard.spawn_peer(|c| c.hot_keys.percent = 0).await;
    let crowd = peer.order_all(voucher, &tokens[100..]).await;
    assert_eq!(tally(&crowd), BTreeMap::from([("OK".to_owned(), 500), ("SOLD_OUT".to_owned(), 300)]));
    audited(&peer, voucher, 600).await;
    peer.stop().await;
}
