//! Segmented stock against a real Redis (and, in scripts/check-stack's second
//! pass, the local cluster, where the segments sit on distinct masters):
//! buyers race, segments run dry and borrow, borrowers die between the two
//! halves of a borrow, and at the end every unit is accounted for.

use std::{collections::HashSet, sync::Arc, time::Duration};

use hmdp_redis::{Endpoint, Redis};
use hmdp_segments::{Bought, SegmentKeys, SegmentedStock, SlotOwners, choose_tags, route};
use redis::{AsyncCommands, Script};

/// REDIS_URL, or the cluster of REDIS_CLUSTER_NODES when that is set
/// (scripts/check-stack runs this suite a second time on the local cluster).
async fn redis() -> Redis {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let nodes = std::env::var("REDIS_CLUSTER_NODES").ok().filter(|n| !n.trim().is_empty());
    Endpoint::new(&url, nodes.as_deref())
        .unwrap()
        .connect(Duration::from_secs(10))
        .await
        .expect("connecting to the test Redis")
}

/// A voucher's segments under keys no other test uses, placed as the
/// service places them: on distinct masters where the cluster has them.
async fn segmented(segments: usize) -> (SegmentedStock, Redis) {
    let mut redis = redis().await;
    let owners = SlotOwners::read(&mut redis).await;
    let voucher = rand_voucher();
    let keys = choose_tags(voucher, segments, &owners)
        .into_iter()
        .map(|tag| {
            let key = |what: &str| format!("test:segments:{what}:{{{tag}}}");
            SegmentKeys { stock: key("stock"), buyers: key("buyers"), lent: key("lent"), received: key("received") }
        })
        .collect();
    (SegmentedStock::new(redis.clone(), keys), redis)
}

fn rand_voucher() -> u64 {
    u64::from_le_bytes(uuid::Uuid::new_v4().as_bytes()[..8].try_into().unwrap()) >> 16
}

async fn set_stocks(stock: &SegmentedStock, redis: &mut Redis, stocks: &[i64]) {
    stock.put_on_sale(0).await.unwrap();
    for (keys, units) in stock.segments().iter().zip(stocks) {
        let _: () = redis.set(&keys.stock, units).await.unwrap();
    }
}

async fn remove(stock: &SegmentedStock, redis: &mut Redis) {
    for keys in stock.segments() {
        let _: () = redis.del(&[&keys.stock, &keys.buyers, &keys.lent, &keys.received]).await.unwrap();
    }
}

/// Buyers at once, as many as an instance under a sale has in flight:
/// enough to race on every segment, few enough that a shared two-core box
/// running the cluster answers within the connection's response timeout.
const RACERS: usize = 256;

/// Every user buys once, `RACERS` of them at any moment, on four threads.
async fn race(stock: &SegmentedStock, users: impl IntoIterator<Item = u64>) -> Vec<(u64, Bought)> {
    use futures::StreamExt;
    futures::stream::iter(users)
        .map(|user| {
            let stock = stock.clone();
            tokio::spawn(async move { (user, stock.buy(user).await.unwrap()) })
        })
        .buffer_unordered(RACERS)
        .map(Result::unwrap)
        .collect()
        .await
}

/// What the segments hold at rest: stock, units in flight, buyers.
async fn at_rest(stock: &SegmentedStock, redis: &mut Redis) -> (i64, i64, u64) {
    let reading = stock.reading().await.unwrap();
    let mut buyers = 0;
    for keys in stock.segments() {
        buyers += redis.scard::<_, u64>(&keys.buyers).await.unwrap();
    }
    (reading.stock.iter().sum(), reading.in_flight, buyers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_as_many_buyers_as_units_every_buyer_gets_one_though_all_the_stock_is_in_one_segment() {
    let (stock, mut redis) = segmented(8).await;
    let mut units = [0; 8];
    units[3] = 400;
    set_stocks(&stock, &mut redis, &units).await;

    let outcomes = race(&stock, 1..=400).await;

    let taken = outcomes.iter().filter(|(_, b)| matches!(b, Bought::Taken { .. })).count();
    let refused: Vec<_> = outcomes.iter().filter(|(_, b)| !matches!(b, Bought::Taken { .. })).collect();
    assert_eq!(taken, 400, "a buyer was refused while a unit was left: {refused:?}");
    for (user, bought) in &outcomes {
        assert_eq!(*bought, Bought::Taken { segment: route(*user, 8) }, "each buyer in their own segment");
    }
    assert_eq!(at_rest(&stock, &mut redis).await, (0, 0, 400), "stock, in flight, buyers");
    // Each of the seven empty segments borrowed, and half of the fullest
    // at a time keeps borrows far below one per unit.
    let lends = stock.reading().await.unwrap().lends;
    assert!((7..=60).contains(&lends), "{lends} borrows for 400 units");
    remove(&stock, &mut redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_buyers_and_their_retries_never_oversell_nor_buy_twice_and_the_last_unit_sells() {
    let (stock, mut redis) = segmented(8).await;
    stock.put_on_sale(301).await.unwrap();

    // 1,200 users, each sending twice at once.
    let outcomes = race(&stock, (1..=1_200u64).chain(1..=1_200u64)).await;

    let winners: Vec<u64> =
        outcomes.iter().filter(|(_, b)| matches!(b, Bought::Taken { .. })).map(|(user, _)| *user).collect();
    assert_eq!(winners.len(), 301, "every unit sold, none twice");
    assert_eq!(winners.iter().collect::<HashSet<_>>().len(), 301, "no user holds two");
    assert!(outcomes.iter().all(|(_, b)| *b != Bought::Unsettled), "nothing left in flight");
    let sold_out = outcomes.iter().filter(|(_, b)| *b == Bought::SoldOut).count();
    let twice = outcomes.iter().filter(|(_, b)| *b == Bought::AlreadyBought).count();
    assert_eq!(sold_out + twice + 301, 2_400);
    assert_eq!(at_rest(&stock, &mut redis).await, (0, 0, 301));
    remove(&stock, &mut redis).await;
}

#[tokio::test]
async fn a_borrower_that_dies_between_the_two_halves_loses_no_unit_and_cannot_credit_it_late() {
    let (stock, mut redis) = segmented(4).await;
    set_stocks(&stock, &mut redis, &[0, 10, 0, 0]).await;

    // The lender's half, then the borrower dies.
    let borrow = stock.lend(1, 0, 5).await.unwrap().expect("segment 1 lends");
    assert_eq!(borrow.units, 5);
    let reading = stock.reading().await.unwrap();
    assert_eq!((reading.stock, reading.in_flight), (vec![0, 5, 0, 0], 5), "the units are in flight");

    // A young borrow is left alone: its borrower may be alive.
    let recovered = stock.recover(Duration::from_secs(60)).await.unwrap();
    assert_eq!((recovered.returned, recovered.forgotten), (0, 0));

    tokio::time::sleep(Duration::from_millis(20)).await;
    let recovered = stock.recover(Duration::from_millis(10)).await.unwrap();
    assert_eq!((recovered.returned, recovered.forgotten), (5, 0));
    let reading = stock.reading().await.unwrap();
    assert_eq!((reading.stock, reading.in_flight), (vec![0, 10, 0, 0], 0), "back with the lender");

    // The borrower was only slow: its second half now finds the borrow void.
    assert!(!stock.complete(&borrow).await.unwrap(), "a void borrow is not credited");
    assert_eq!(stock.reading().await.unwrap().stock, vec![0, 10, 0, 0], "nothing counted twice");
    // And a second recovery finds nothing to do.
    assert_eq!(stock.recover(Duration::ZERO).await.unwrap().returned, 0);
    remove(&stock, &mut redis).await;
}

#[tokio::test]
async fn a_borrower_that_dies_after_its_credit_keeps_the_units_and_the_record_is_only_forgotten() {
    let (stock, mut redis) = segmented(4).await;
    set_stocks(&stock, &mut redis, &[0, 0, 8, 0]).await;

    let borrow = stock.lend(2, 1, 4).await.unwrap().expect("segment 2 lends");
    // The borrower's half alone, as the borrower would run it, then it dies
    // before the lender's record goes.
    let credit = Script::new(include_str!("../lua/segment_credit.lua"));
    let to = &stock.segments()[1];
    let credited: i64 = credit
        .key(&to.stock)
        .key(&to.received)
        .key(&to.lent)
        .arg(&borrow.id)
        .arg(borrow.units)
        .arg(&borrow.epoch)
        .invoke_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(credited, 1);
    assert_eq!(stock.reading().await.unwrap().in_flight, 4, "still recorded on the lender");

    let recovered = stock.recover(Duration::ZERO).await.unwrap();
    assert_eq!((recovered.returned, recovered.forgotten), (0, 1));
    let reading = stock.reading().await.unwrap();
    assert_eq!((reading.stock, reading.in_flight), (vec![0, 4, 4, 0], 0), "credited once, never returned");
    remove(&stock, &mut redis).await;
}

#[tokio::test]
async fn a_borrow_lent_before_the_stock_was_set_anew_is_neither_credited_nor_returned() {
    let (stock, mut redis) = segmented(3).await;
    set_stocks(&stock, &mut redis, &[0, 9, 0]).await;
    let slow = stock.lend(1, 0, 4).await.unwrap().expect("segment 1 lends");
    let dead = stock.lend(1, 2, 2).await.unwrap().expect("segment 1 lends again");
    // The stock is set outright meanwhile, as the service sets it from
    // MariaDB: a new epoch and each segment's stock, the records of the
    // borrows in flight left where they are. What it sets already counts
    // every unit, those in flight too.
    for keys in stock.segments() {
        let _: () = redis.hset(&keys.lent, hmdp_segments::EPOCH, "set-anew").await.unwrap();
        let _: () = redis.set(&keys.stock, 10).await.unwrap();
    }
    assert!(!stock.complete(&slow).await.unwrap(), "a credit from before the setting does not land");
    assert_eq!(stock.reading().await.unwrap().stock, vec![10, 10, 10], "nor is it returned to the lender");
    // A borrower that died: recovery ends its borrow without returning it.
    assert_eq!(stock.recover(Duration::ZERO).await.unwrap().returned, 0);
    assert!(!stock.complete(&dead).await.unwrap());
    let reading = stock.reading().await.unwrap();
    assert_eq!((reading.stock, reading.in_flight), (vec![10, 10, 10], 0), "exactly what was set, nothing added");
    remove(&stock, &mut redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recovery_racing_live_borrows_never_counts_a_unit_twice() {
    let (stock, mut redis) = segmented(6).await;
    stock.put_on_sale(240).await.unwrap();
    // Recovery with no age at all voids live borrows between their halves:
    // the harshest interleaving of the two.
    let done = Arc::new(tokio::sync::Notify::new());
    let recovering = {
        let (stock, done) = (stock.clone(), done.clone());
        tokio::spawn(async move {
            let mut returned = 0;
            loop {
                tokio::select! {
                    _ = done.notified() => return returned,
                    r = stock.recover(Duration::ZERO) => returned += r.unwrap().returned,
                }
            }
        })
    };

    let outcomes = race(&stock, 1..=1_000).await;
    done.notify_one();
    let returned = recovering.await.unwrap();
    // What the last race left in flight, ended.
    stock.recover(Duration::ZERO).await.unwrap();

    let taken = outcomes.iter().filter(|(_, b)| matches!(b, Bought::Taken { .. })).count() as i64;
    let (left, in_flight, buyers) = at_rest(&stock, &mut redis).await;
    assert_eq!(in_flight, 0);
    assert_eq!(taken + left, 240, "sold + left = put on sale ({returned} units returned by recovery)");
    assert_eq!(buyers as i64, taken);
    assert!(taken <= 240);
    remove(&stock, &mut redis).await;
}

#[tokio::test]
async fn a_unit_that_comes_back_after_a_sell_out_sells_to_a_buyer_of_another_segment_once_reopened() {
    let (stock, mut redis) = segmented(4).await;
    set_stocks(&stock, &mut redis, &[1, 0, 0, 0]).await;
    let in_segment = |segment: usize| (1..).find(|user| route(*user, 4) == segment).unwrap();
    assert_eq!(stock.buy(in_segment(1)).await.unwrap(), Bought::Taken { segment: 1 }, "borrowed from segment 0");
    let late = (100..).find(|user| route(*user, 4) == 2).unwrap();
    assert_eq!(stock.buy(late).await.unwrap(), Bought::SoldOut);

    // A cancelled order of segment 0 gives its unit back.
    let _: () = redis.incr(&stock.segments()[0].stock, 1).await.unwrap();
    assert_eq!(stock.buy(late).await.unwrap(), Bought::SoldOut, "the sell-out is remembered a moment");
    stock.reopen();
    assert_eq!(stock.buy(late).await.unwrap(), Bought::Taken { segment: 2 });
    assert_eq!(at_rest(&stock, &mut redis).await, (0, 0, 2));
    remove(&stock, &mut redis).await;
}

#[tokio::test]
async fn the_segments_of_a_voucher_sit_on_as_many_masters_as_the_redis_has() {
    let mut redis = redis().await;
    let owners = SlotOwners::read(&mut redis).await;
    let masters = redis.masters().await.unwrap().len();
    assert_eq!(owners.masters(), masters);
    for voucher in [1, 42, rand_voucher()] {
        let tags = choose_tags(voucher, 8, &owners);
        let used: HashSet<usize> =
            tags.iter().map(|tag| owners.master_of(hmdp_segments::slot(tag)).expect("a served slot")).collect();
        assert_eq!(used.len(), masters.min(8), "voucher {voucher}: {tags:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn buyers_are_not_told_sold_out_while_a_dead_borrowers_units_are_in_flight_and_buy_them_once_recovered() {
    let (stock, mut redis) = segmented(4).await;
    set_stocks(&stock, &mut redis, &[0, 0, 3, 0]).await;
    // A borrower takes all three for segment 1 and dies before its credit.
    let borrow = stock.lend(2, 1, 3).await.unwrap().expect("segment 2 lends");
    assert_eq!(borrow.units, 3);

    // Every segment reads zero, but three units are in flight: not sold out.
    let waiting: Vec<u64> = (1..).filter(|user| route(*user, 4) != 1).take(40).collect();
    let outcomes = race(&stock, waiting.iter().copied()).await;
    assert!(outcomes.iter().all(|(_, b)| *b == Bought::Unsettled), "{outcomes:?}");

    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(stock.recover(Duration::from_millis(10)).await.unwrap().returned, 3);
    let outcomes = race(&stock, waiting.iter().copied()).await;
    let taken = outcomes.iter().filter(|(_, b)| matches!(b, Bought::Taken { .. })).count();
    assert_eq!(taken, 3, "the recovered units sell: {outcomes:?}");
    assert!(outcomes.iter().all(|(_, b)| matches!(b, Bought::Taken { .. } | Bought::SoldOut)));
    assert_eq!(at_rest(&stock, &mut redis).await, (0, 0, 3));
    remove(&stock, &mut redis).await;
}
