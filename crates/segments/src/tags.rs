//! Where segments live: each segment's keys share a hash tag of their own,
//! and on a Redis Cluster the tags are chosen so that the segments land on
//! distinct masters where there are enough of them. A segment on the same
//! master as another spreads nothing; that is the whole point of the split.

use hmdp_redis::slots::{SlotOwners, slot};

/// How many salts are tried per segment for a master no other segment has.
/// With three masters and a uniform hash, each try misses with probability
/// at most 2/3: 64 tries all missing is below one in 10^11.
const SALTS: u32 = 64;

/// The hash tags of a voucher's `segments` segments. Segment 0's tag is the
/// voucher id itself, so a voucher of one segment keeps the keys it always
/// had; segment `i` is `<voucher>.<i>`, or `<voucher>.<i>.<salt>` with the
/// first salt that puts it on a master fewer segments use (each master gets
/// one segment before any gets two). Deterministic: the same cluster
/// layout gives the same tags, though callers record them with the voucher
/// so that a cluster resharded later still finds the keys.
pub fn choose_tags(voucher_id: u64, segments: usize, owners: &SlotOwners) -> Vec<String> {
    let mut tags = vec![voucher_id.to_string()];
    let mut load = vec![0usize; owners.masters()];
    if let Some(m) = owners.master_of(slot(&tags[0])) {
        load[m] += 1;
    }
    for index in 1..segments {
        let least = load.iter().copied().min().unwrap_or(0);
        let candidates = std::iter::once(format!("{voucher_id}.{index}"))
            .chain((1..SALTS).map(|s| format!("{voucher_id}.{index}.{s}")));
        let mut chosen = None;
        for tag in candidates {
            let master = owners.master_of(slot(&tag));
            let fits = master.is_some_and(|m| load[m] == least);
            if chosen.is_none() || fits {
                chosen = Some((tag, master));
            }
            if fits {
                break;
            }
        }
        let (tag, master) = chosen.expect("at least one candidate");
        if let Some(m) = master {
            load[m] += 1;
        }
        tags.push(tag);
    }
    tags
}

#[cfg(test)]
mod tests {
    use super::*;
    use hmdp_redis::slots::slot;

    /// Three masters with a third of the slots each, as the local
    /// cluster has (its `CLUSTER NODES` is in the Redis crate's tests).
    const NODES: &str = "\
a 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
b 127.0.0.1:7002@17002 master - 0 0 2 connected 5461-10922
c 127.0.0.1:7003@17003 master - 0 0 3 connected 10923-16383
";

    #[test]
    fn segment_zero_keeps_the_vouchers_own_tag() {
        assert_eq!(choose_tags(42, 1, &SlotOwners::single()), vec!["42"]);
        assert_eq!(choose_tags(42, 3, &SlotOwners::single()), vec!["42", "42.1", "42.2"]);
    }

    #[test]
    fn segments_land_on_distinct_masters_while_there_are_masters_to_spare() {
        let owners = SlotOwners::from_cluster_nodes(NODES);
        for voucher in 1..200u64 {
            let tags = choose_tags(voucher, 8, &owners);
            assert_eq!(tags.len(), 8);
            let masters: Vec<usize> = tags.iter().map(|t| owners.master_of(slot(t)).unwrap()).collect();
            let first_three: std::collections::HashSet<_> = masters[..3].iter().collect();
            assert_eq!(first_three.len(), 3, "voucher {voucher}: {tags:?} on {masters:?}");
            let mut per_master = [0; 3];
            masters.iter().for_each(|m| per_master[*m] += 1);
            assert!(per_master.iter().all(|n| (2..=3).contains(n)), "voucher {voucher}: {per_master:?}");
            assert_eq!(tags, choose_tags(voucher, 8, &owners), "the same layout gives the same tags");
        }
    }
}
