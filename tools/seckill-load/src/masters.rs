//! Which Redis Cluster master serves each voucher of a sale. Every key of
//! a voucher shares its hash tag `{<voucherId>}`, so one master serves the
//! voucher whole: a fault aimed at "the master of a voucher", or a sale
//! meant to spread its vouchers over the masters, needs to know which.

use serde::Serialize;

/// Where one voucher lives.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    pub voucher_id: u64,
    pub slot: u16,
    /// `host:port` of the master serving the slot; `None` when no master
    /// serves it (a cluster in motion).
    pub master: Option<String>,
}

/// The masters of a cluster (from the text of `CLUSTER NODES`), each with
/// the slot ranges it serves, and where each of `vouchers` lives.
pub fn place(nodes: &str, vouchers: &[u64]) -> (Vec<Placement>, usize) {
    let mut masters: Vec<(String, Vec<(u16, u16)>)> = Vec::new();
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let is_master = fields.get(2).is_some_and(|flags| flags.split(',').any(|f| f == "master"));
        if !is_master || fields.len() < 8 || fields[2].split(',').any(|f| f == "fail") {
            continue;
        }
        // `ip:port@cport[,hostname]`: the address clients use.
        let address = fields[1].split(['@', ',']).next().unwrap_or(fields[1]).to_owned();
        let ranges = fields[8..]
            .iter()
            .filter(|range| !range.starts_with('['))
            .filter_map(|range| {
                let (first, last) = range.split_once('-').unwrap_or((range, range));
                Some((first.parse().ok()?, last.parse().ok()?))
            })
            .collect();
        masters.push((address, ranges));
    }
    let placements = vouchers
        .iter()
        .map(|&voucher_id| {
            let slot = hmdp_segments::slot(&format!("{{{voucher_id}}}"));
            let master = masters
                .iter()
                .find(|(_, ranges)| ranges.iter().any(|(first, last)| (*first..=*last).contains(&slot)))
                .map(|(address, _)| address.clone());
            Placement { voucher_id, slot, master }
        })
        .collect();
    let serving = masters.iter().filter(|(_, ranges)| !ranges.is_empty()).count();
    (placements, serving)
}

/// The distinct masters the vouchers are on, and the warning due when that
/// is fewer than they could cover: min(vouchers, masters).
pub fn spread(placements: &[Placement], masters: usize) -> (usize, Option<String>) {
    let mut used: Vec<&str> = placements.iter().filter_map(|p| p.master.as_deref()).collect();
    used.sort_unstable();
    used.dedup();
    let could = placements.len().min(masters);
    let warning = (used.len() < could).then(|| {
        format!(
            "WARNING: the {} vouchers are on {} of the cluster's {masters} masters ({could} possible): a fault on one master hits more than one voucher",
            placements.len(),
            used.len()
        )
    });
    (used.len(), warning)
}

/// Where the sale's vouchers live, read from the cluster the settings
/// name; `None` on one Redis server.
pub async fn read(settings: &hmdp::config::RedisSettings, vouchers: &[u64]) -> anyhow::Result<Option<Vec<Placement>>> {
    if settings.cluster_nodes.as_deref().is_none_or(|n| n.trim().is_empty()) {
        return Ok(None);
    }
    let mut redis = hmdp::startup::connect_redis(settings).await?;
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(&mut redis).await?;
    let (placements, masters) = place(&nodes, vouchers);
    for p in &placements {
        eprintln!(
            "voucher {}: hash tag {{{}}}, slot {}, master {}",
            p.voucher_id,
            p.voucher_id,
            p.slot,
            p.master.as_deref().unwrap_or("NONE (no master serves the slot)")
        );
    }
    let (used, warning) = spread(&placements, masters);
    eprintln!("{} voucher(s) on {used} of {masters} masters", placements.len());
    if let Some(warning) = warning {
        eprintln!("{warning}");
    }
    Ok(Some(placements))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `CLUSTER NODES` of three masters and their replicas, one master
    /// serving two ranges.
    const NODES: &str = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:7004@17004 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:7002@17002 master - 0 1426238316232 2 connected 5461-10922
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:7003@17003,redis3 master - 0 1426238318243 3 connected 10923-16383
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-100 101-5460
";

    #[test]
    fn each_voucher_is_placed_on_the_master_serving_its_hash_tags_slot() {
        // Slots from `CLUSTER KEYSLOT {1}`, `{2}`, `{3}`: 9842, 5649, 1584.
        let (placed, masters) = place(NODES, &[1, 2, 3]);
        assert_eq!(masters, 3);
        let at: Vec<(u16, Option<&str>)> = placed.iter().map(|p| (p.slot, p.master.as_deref())).collect();
        assert_eq!(
            at,
            [(9842, Some("127.0.0.1:7002")), (5649, Some("127.0.0.1:7002")), (1584, Some("127.0.0.1:7001"))]
        );
    }

    #[test]
    fn vouchers_on_fewer_masters_than_they_could_cover_are_warned_of() {
        let (placed, masters) = place(NODES, &[1, 2, 3]);
        let (used, warning) = spread(&placed, masters);
        assert_eq!(used, 2);
        assert!(warning.is_some_and(|w| w.contains("on 2 of the cluster's 3 masters (3 possible)")));
        let (placed, masters) = place(NODES, &[1, 3]);
        assert_eq!(spread(&placed, masters), (2, None));
        let (placed, masters) = place(NODES, &[1]);
        assert_eq!(spread(&placed, masters), (1, None), "one voucher covers all it can");
    }
}
