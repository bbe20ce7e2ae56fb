//! Server CPU per request: what each group of server processes (the
//! instances, nginx, Redis, MariaDB) spent, read from `/proc/<pid>/stat`
//! (user + system time) before the first request and after the run, rows
//! landed and drained, divided by the requests sent. The load tool's own
//! CPU is not counted: on one box it competes with the servers, but it is
//! the client, not the cost of an order.

use std::collections::BTreeMap;

use serde::Serialize;

/// `/proc/<pid>/stat` counts in USER_HZ, which Linux fixes at 100 for
/// userspace whatever the kernel's own tick.
const TICKS_PER_SEC: f64 = 100.0;

/// `NAME=PID,PID,...`, as `--cpu` takes it.
#[derive(Debug, Clone)]
pub struct Group {
    pub name: String,
    pub pids: Vec<u32>,
}

pub fn parse_group(spec: &str) -> Result<Group, String> {
    let (name, pids) = spec.split_once('=').ok_or_else(|| format!("{spec:?}: expected NAME=PID[,PID...]"))?;
    let pids = pids
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| p.trim().parse::<u32>().map_err(|_| format!("{spec:?}: {p:?} is not a pid")))
        .collect::<Result<Vec<_>, _>>()?;
    if name.is_empty() || pids.is_empty() {
        return Err(format!("{spec:?}: expected NAME=PID[,PID...]"));
    }
    Ok(Group { name: name.to_owned(), pids })
}

/// User + system ticks of one process: fields 14 and 15 of its stat line,
/// counted after the command name (which may hold spaces and parentheses).
fn ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    Some(fields.next()?.parse::<u64>().ok()? + fields.next()?.parse::<u64>().ok()?)
}

/// Each group's CPU ticks at one moment, and how many of its processes
/// were gone (counted as 0).
pub type Sample = BTreeMap<String, (u64, usize)>;

/// Ticks of each group now; a process that is gone counts as 0, and the
/// run then reports it (`missing`).
pub fn sample(groups: &[Group]) -> Sample {
    groups
        .iter()
        .map(|group| {
            let read: Vec<Option<u64>> = group
                .pids
                .iter()
                .map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|s| ticks(&s)))
                .collect();
            let missing = read.iter().filter(|t| t.is_none()).count();
            (group.name.clone(), (read.into_iter().flatten().sum(), missing))
        })
        .collect()
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuUse {
    pub cpu_secs: f64,
    pub per_request_us: f64,
    /// Processes that were gone by the end of the run (their time is lost).
    pub missing: usize,
}

pub fn per_request(before: &Sample, after: &Sample, requests: u64) -> BTreeMap<String, CpuUse> {
    after
        .iter()
        .map(|(name, &(ticks_after, missing))| {
            let ticks_before = before.get(name).map_or(0, |b| b.0);
            let cpu_secs = ticks_after.saturating_sub(ticks_before) as f64 / TICKS_PER_SEC;
            let per_request_us = if requests == 0 { 0.0 } else { cpu_secs * 1e6 / requests as f64 };
            (name.clone(), CpuUse { cpu_secs, per_request_us, missing })
        })
        .collect()
}

pub fn render(usage: &BTreeMap<String, CpuUse>) -> String {
    let total: f64 = usage.values().map(|u| u.per_request_us).sum();
    let mut out = String::from("Server CPU per request:");
    for (name, u) in usage {
        out += &format!(" {name} {:.0} µs ({:.2} s);", u.per_request_us, u.cpu_secs);
    }
    out + &format!(" total {total:.0} µs\n")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::{parse_group, per_request, ticks};

    #[test]
    fn user_and_system_time_are_read_after_a_name_with_spaces() {
        let stat = "4242 (nginx: worker (x)) S 1 4242 4242 0 -1 4194624 120 0 0 0 731 269 0 0 20 0 1 0 99 0 0";
        assert_eq!(ticks(stat), Some(1_000));
    }

    #[test]
    fn a_group_is_a_name_and_its_pids() {
        let group = parse_group("nginx=10,11, 12").unwrap();
        assert_eq!((group.name.as_str(), group.pids), ("nginx", vec![10, 11, 12]));
        assert!(parse_group("nginx").is_err());
        assert!(parse_group("nginx=").is_err());
        assert!(parse_group("nginx=ten").is_err());
    }

    #[test]
    fn cpu_per_request_is_the_ticks_spent_over_the_requests() {
        let before = BTreeMap::from([("redis".to_owned(), (1_000, 0))]);
        let after = BTreeMap::from([("redis".to_owned(), (1_300, 0))]);
        let usage = per_request(&before, &after, 30_000);
        assert_eq!(usage["redis"].cpu_secs, 3.0);
        assert_eq!(usage["redis"].per_request_us, 100.0);
    }
}
