//! How the consumer reads its streams: its group made when missing, its
//! own pending entries again after a restart, then new entries, with one
//! blocking read over every stream on one Redis, or a read per stream on a
//! cluster.

use std::{collections::HashMap, time::Duration};

use hmdp_redis::Redis;
use redis::{
    AsyncCommands,
    streams::{StreamId, StreamReadReply},
};

use super::{BLOCK, Consumer, IDLE_POLL, Stream};
use crate::seckill::asynchronous::{
    shared_batch::StreamBatch,
    stream::{GROUP, PersistError},
};

impl Consumer {
    /// Creates the group from the stream's start, making the stream when it
    /// does not exist; an existing group is left as it is.
    pub(super) async fn ensure_group(&self, stream: &Stream) -> Result<(), PersistError> {
        let created: redis::RedisResult<()> =
            self.redis.clone().xgroup_create_mkstream(&stream.keys().orders, GROUP, "0").await;
        match created {
            Err(err) if err.code() == Some("BUSYGROUP") => Ok(()),
            other => Ok(other?),
        }
    }

    pub(super) async fn reread_own_pending(&self, stream: &Stream) -> Result<(), PersistError> {
        let mut after = "0".to_owned();
        loop {
            let reply: StreamReadReply = redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg(GROUP)
                .arg(&self.name)
                .arg("COUNT")
                .arg(self.batch_max)
                .arg("STREAMS")
                .arg(&stream.keys().orders)
                .arg(&after)
                .query_async(&mut self.redis.clone())
                .await?;
            let entries: Vec<StreamId> = reply.keys.into_iter().flat_map(|k| k.ids).collect();
            let Some(last) = entries.last() else { return Ok(()) };
            after = last.id.clone();
            let (voucher, count) = (stream.voucher, entries.len());
            tracing::info!(consumer = %self.name, voucher, segment = stream.segment, count, "re-reading own pending entries");
            self.handle(stream, entries).await;
        }
    }

    /// New entries of the active streams. One Redis (or one stream) takes
    /// one blocking read over every stream; a cluster keeps the
    /// streams in many slots and refuses a read across them, so there each
    /// stream is read on its own, without blocking (a blocking read would
    /// hold up the reads queued behind it on the node's connection), and an
    /// empty round waits `IDLE_POLL`.
    pub(super) async fn read_new(&self, streams: &[Stream]) -> Result<(), PersistError> {
        if streams.len() == 1 || !self.blocking.is_cluster() {
            let found = self.read(streams, Some(BLOCK), &mut self.blocking.clone()).await?;
            self.handle_all(found).await;
            return Ok(());
        }
        let reads = streams.iter().map(|stream| {
            let mut redis = self.redis.clone();
            async move { self.read(std::slice::from_ref(stream), None, &mut redis).await }
        });
        // What was read is persisted even when another stream's read
        // failed (its master cut off from this instance).
        let (mut found, mut failed) = (Vec::new(), None);
        for read in futures::future::join_all(reads).await {
            match read {
                Ok(entries) => found.extend(entries),
                Err(err) => failed = Some(err),
            }
        }
        if found.is_empty() {
            tokio::time::sleep(IDLE_POLL).await;
        }
        self.handle_all(found).await;
        failed.map_or(Ok(()), Err)
    }

    async fn read(
        &self,
        read_from: &[Stream],
        block: Option<Duration>,
        redis: &mut Redis,
    ) -> Result<Vec<(Stream, Vec<StreamId>)>, PersistError> {
        let streams: Vec<&str> = read_from.iter().map(|s| s.keys().orders.as_str()).collect();
        let mut read = redis::cmd("XREADGROUP");
        read.arg("GROUP").arg(GROUP).arg(&self.name).arg("COUNT").arg(self.batch_max);
        if let Some(block) = block {
            read.arg("BLOCK").arg(block.as_millis() as u64);
        }
        let reply: Option<StreamReadReply> =
            read.arg("STREAMS").arg(&streams).arg(vec![">"; streams.len()]).query_async(redis).await?;
        let by_stream: HashMap<&str, &Stream> = streams.iter().copied().zip(read_from).collect();
        Ok(reply
            .map(|r| r.keys)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|key| Some(((*by_stream.get(key.key.as_str())?).clone(), key.ids)))
            .collect())
    }

    /// Several streams' entries in one transaction when they are the plain
    /// case (`shared_batch`), at most `batch_max` entries a transaction,
    /// else stream by stream.
    async fn handle_all(&self, found: Vec<(Stream, Vec<StreamId>)>) {
        for shared in shared_batches(found, self.batch_max) {
            self.handle_shared(shared).await;
        }
    }

    /// A shared batch whose commit failed or whose answer was lost is left
    /// pending, as a stream's batch is: tried again once claimed, when a
    /// commit still in flight has landed and is seen.
    async fn handle_shared(&self, found: Vec<(Stream, Vec<StreamId>)>) {
        if found.len() > 1 {
            let batches: Vec<StreamBatch<'_>> =
                found.iter().map(|(stream, raw)| (stream.voucher, stream.keys(), raw.as_slice())).collect();
            match self.batch().persist_together(&batches).await {
                Ok(true) => return,
                Ok(false) => {}
                Err(err) => {
                    metrics::counter!("hmdp_async_consumer_failures_total", "what" => "batch_unavailable").increment(1);
                    tracing::warn!(consumer = %self.name, streams = found.len(), error = %err, "shared batch not persisted; will retry");
                    return;
                }
            }
        }
        for (stream, entries) in found {
            self.handle(&stream, entries).await;
        }
    }
}

/// What a round read, cut into shared batches of whole streams, in order,
/// each of at most `max` entries (or of one stream, whatever its size).
fn shared_batches<S, E>(found: Vec<(S, Vec<E>)>, max: usize) -> Vec<Vec<(S, Vec<E>)>> {
    let (mut batches, mut shared, mut entries) = (Vec::new(), Vec::new(), 0);
    for (stream, raw) in found {
        if !shared.is_empty() && entries + raw.len() > max {
            batches.push(std::mem::take(&mut shared));
            entries = 0;
        }
        entries += raw.len();
        shared.push((stream, raw));
    }
    if !shared.is_empty() {
        batches.push(shared);
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::shared_batches;

    #[test]
    fn a_rounds_streams_are_shared_in_batches_of_at_most_the_batch_max_entries() {
        let found = vec![("a", vec![1, 2]), ("b", vec![3, 4]), ("c", vec![5]), ("d", vec![6, 7, 8, 9, 10])];
        let names = |max| -> Vec<Vec<&str>> {
            shared_batches(found.clone(), max).into_iter().map(|b| b.into_iter().map(|(s, _)| s).collect()).collect()
        };
        assert_eq!(names(4), vec![vec!["a", "b"], vec!["c"], vec!["d"]], "a stream above the max goes alone");
        assert_eq!(names(5), vec![vec!["a", "b", "c"], vec!["d"]]);
        assert_eq!(names(100), vec![vec!["a", "b", "c", "d"]]);
        assert!(shared_batches(Vec::<(&str, Vec<u8>)>::new(), 4).is_empty());
    }
}
