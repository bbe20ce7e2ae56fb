//! Where a key lives on a Redis Cluster: its slot, and which master
//! serves each slot. Shared by whatever places keys on masters (the
//! segments) and whatever counts what each master is asked (the hot keys).

/// Slots of a Redis Cluster.
pub const SLOTS: u16 = 16_384;

/// The slot of a key (or a bare hash tag), as Redis Cluster computes it:
/// CRC16/XMODEM of its [`hash_tag`], modulo 16384.
pub fn slot(key: &str) -> u16 {
    slot_of_tag(hash_tag(key.as_bytes()))
}

/// The part of a key that picks its slot: the text inside the first
/// `{...}` when it is not empty, else the whole key.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    let tagged = key.iter().position(|b| *b == b'{').and_then(|open| {
        let close = key[open + 1..].iter().position(|b| *b == b'}')?;
        (close > 0).then(|| &key[open + 1..open + 1 + close])
    });
    tagged.unwrap_or(key)
}

/// The slot of a hash tag that [`hash_tag`] already took out of its key.
pub fn slot_of_tag(tag: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(tag) % SLOTS
}

/// Which master serves each slot.
#[derive(Debug, Clone)]
pub struct SlotOwners {
    /// Per slot, the index of its master; `u16::MAX` for a slot no master
    /// serves (a cluster in motion).
    owner: Vec<u16>,
    /// Each master's `host:port`, by index.
    names: Vec<String>,
}

impl SlotOwners {
    /// One server: every slot is its.
    pub fn single() -> Self {
        Self { owner: vec![0; usize::from(SLOTS)], names: vec!["the only master".to_owned()] }
    }

    /// From the text of `CLUSTER NODES`: each master line ends with the
    /// slot ranges it serves (`0-5460`, `5461`); migrating slots
    /// (`[...]`) count for the master that serves them now.
    pub fn from_cluster_nodes(nodes: &str) -> Self {
        let mut owner = vec![u16::MAX; usize::from(SLOTS)];
        let mut names = Vec::new();
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let is_master = fields.get(2).is_some_and(|flags| flags.split(',').any(|f| f == "master"));
            if !is_master || fields.len() < 9 {
                continue;
            }
            for range in &fields[8..] {
                if range.starts_with('[') {
                    continue;
                }
                let (first, last) = range.split_once('-').unwrap_or((range, range));
                let (Ok(first), Ok(last)) = (first.parse::<u16>(), last.parse::<u16>()) else { continue };
                for slot in first..=last.min(SLOTS - 1) {
                    owner[usize::from(slot)] = names.len() as u16;
                }
            }
            names.push(fields[1].split(['@', ',']).next().unwrap_or(fields[1]).to_owned());
        }
        if names.is_empty() {
            names.push("no master".to_owned());
        }
        Self { owner, names }
    }

    /// The slot map of the Redis behind `redis`: the cluster's, from
    /// `CLUSTER NODES`, or one server's. A cluster that cannot say is taken
    /// as one server (segments still work, on whatever masters their tags
    /// land), and said in the log.
    pub async fn read(redis: &mut crate::Redis) -> Self {
        Self::try_read(redis).await.unwrap_or_else(|err| {
            tracing::warn!(%err, "CLUSTER NODES failed; taken as one server");
            Self::single()
        })
    }

    /// [`read`](Self::read), with a failed `CLUSTER NODES` left to the
    /// caller.
    pub async fn try_read(redis: &mut crate::Redis) -> redis::RedisResult<Self> {
        if !redis.is_cluster() {
            return Ok(Self { names: vec![redis.endpoint().describe()], ..Self::single() });
        }
        let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(redis).await?;
        Ok(Self::from_cluster_nodes(&nodes))
    }

    pub fn masters(&self) -> usize {
        self.names.len()
    }

    /// The `host:port` of the master of that index (one server: its URL
    /// without password).
    pub fn master_name(&self, master: usize) -> &str {
        self.names.get(master).map_or("", String::as_str)
    }

    /// The master serving `slot`, if one does.
    pub fn master_of(&self, slot: u16) -> Option<usize> {
        self.owner.get(usize::from(slot)).filter(|m| **m != u16::MAX).map(|m| usize::from(*m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `CLUSTER NODES` of the project's local cluster (scripts/stack's
    /// three masters and three replicas).
    const NODES: &str = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:7004@17004 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:7002@17002 master - 0 1426238316232 2 connected 5461-10922
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:7003@17003 master - 0 1426238318243 3 connected 10923-16383
6ec23923021cf3ffec47632106199cb7f496ce01 127.0.0.1:7005@17005 slave 67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 0 1426238316232 5 connected
824fe116063bc5fcf9f4ffd895bc17aee7731ac3 127.0.0.1:7006@17006 slave 292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 0 1426238317741 6 connected
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
";

    #[test]
    fn slots_are_redis_clusters() {
        // Values from `CLUSTER KEYSLOT`.
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("user1000"));
        let whole = |key: &str| crc16::State::<crc16::XMODEM>::calculate(key.as_bytes()) % SLOTS;
        assert_eq!(slot("foo{}{bar}"), whole("foo{}{bar}"), "an empty first tag hashes the whole key");
        assert_eq!(slot("foo{{bar}}zap"), whole("{bar"), "the tag ends at the first closing brace");
        assert_eq!(slot("foo{bar}{zap}"), whole("bar"), "only the first tag counts");
        assert_eq!(slot("seckill:stock:{42}"), slot("42"));
    }

    #[test]
    fn the_owners_of_every_slot_are_read_from_cluster_nodes() {
        let owners = SlotOwners::from_cluster_nodes(NODES);
        assert_eq!(owners.masters(), 3);
        let (a, b, c) = (owners.master_of(0), owners.master_of(5461), owners.master_of(16383));
        assert!(a.is_some() && b.is_some() && c.is_some());
        assert!(a != b && b != c && a != c);
        assert_eq!(owners.master_of(5460), a);
        assert_eq!(owners.master_name(b.unwrap()), "127.0.0.1:7002");
    }
}
