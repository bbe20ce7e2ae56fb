//! A bounded memory of ids: what each instance keeps per voucher (keys
//! built once, ids found missing, vouchers verified, waits that came back
//! short, returned units Redis still owes). Every such memory is a
//! shortcut or a retry list that a later request or round rebuilds, so
//! when one is full it forgets (the stale entries first, then everything)
//! rather than grow with the ids a client makes up.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

pub(crate) struct RecentIds<V = ()> {
    entries: Mutex<HashMap<u64, (Instant, V)>>,
    max: usize,
    /// Entries older than this count as forgotten; `None`: kept until the
    /// memory is full.
    kept: Option<Duration>,
}

impl<V> RecentIds<V> {
    pub(crate) fn new(max: usize, kept: Option<Duration>) -> Self {
        Self { entries: Mutex::default(), max: max.max(1), kept }
    }

    fn fresh(&self, at: Instant) -> bool {
        self.kept.is_none_or(|kept| at.elapsed() < kept)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (Instant, V)>> {
        // A panic while holding the lock left a map that is still a valid
        // map: the memory goes on.
        self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Room for one more id: past `max`, the stale entries go, and if that
    /// is not enough, all of them.
    fn make_room(&self, entries: &mut HashMap<u64, (Instant, V)>) {
        if entries.len() >= self.max {
            entries.retain(|_, (at, _)| self.fresh(*at));
            if entries.len() >= self.max {
                entries.clear();
            }
        }
    }

    /// Whether `id` was remembered and is still fresh.
    pub(crate) fn contains(&self, id: u64) -> bool {
        self.lock().get(&id).is_some_and(|(at, _)| self.fresh(*at))
    }

    /// Remembers `id` (again: its time starts over).
    pub(crate) fn insert(&self, id: u64, value: V) {
        let mut entries = self.lock();
        if !entries.contains_key(&id) {
            self.make_room(&mut entries);
        }
        entries.insert(id, (Instant::now(), value));
    }

    pub(crate) fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Everything remembered, fresh or not, and the memory emptied.
    pub(crate) fn take_all(&self) -> Vec<(u64, V)> {
        self.lock().drain().map(|(id, (_, value))| (id, value)).collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

impl<V: Clone> RecentIds<V> {
    /// The fresh value of `id`, if remembered.
    pub(crate) fn get(&self, id: u64) -> Option<V> {
        self.lock().get(&id).filter(|(at, _)| self.fresh(*at)).map(|(_, value)| value.clone())
    }

    /// The fresh value of `id`, or one made by `make` and remembered.
    pub(crate) fn get_or_insert_with(&self, id: u64, make: impl FnOnce() -> V) -> V {
        let mut entries = self.lock();
        if let Some((at, value)) = entries.get(&id)
            && self.fresh(*at)
        {
            return value.clone();
        }
        self.make_room(&mut entries);
        let value = make();
        entries.insert(id, (Instant::now(), value.clone()));
        value
    }
}

impl<V: Default + Extend<u64>> RecentIds<V> {
    /// Adds `items` to what `id` holds, without taking the time over; a
    /// full memory keeps what it has and drops the newcomer (a retry list:
    /// what is already owed is not forgotten for what comes later).
    pub(crate) fn extend(&self, id: u64, items: impl IntoIterator<Item = u64>) -> bool {
        let mut entries = self.lock();
        if !entries.contains_key(&id) && entries.len() >= self.max {
            return false;
        }
        entries.entry(id).or_insert_with(|| (Instant::now(), V::default())).1.extend(items);
        true
    }
}

#[cfg(test)]
mod tests {
    use std::{collections::HashSet, time::Duration};

    use super::RecentIds;

    #[test]
    fn an_id_is_remembered_until_its_time_is_up() {
        let recent = RecentIds::<()>::new(8, Some(Duration::from_millis(30)));
        recent.insert(7, ());
        assert!(recent.contains(7));
        assert!(!recent.contains(8));
        std::thread::sleep(Duration::from_millis(40));
        assert!(!recent.contains(7), "a stale id is forgotten");
    }

    #[test]
    fn a_full_memory_forgets_instead_of_growing() {
        let recent = RecentIds::<()>::new(3, None);
        for id in 0..100 {
            recent.insert(id, ());
            assert!(recent.len() <= 3, "{} ids held after {id}", recent.len());
            assert!(recent.contains(id), "the newest id is always held");
        }
    }

    #[test]
    fn a_full_memory_drops_its_stale_entries_first() {
        let recent = RecentIds::<()>::new(2, Some(Duration::from_millis(30)));
        recent.insert(1, ());
        std::thread::sleep(Duration::from_millis(40));
        recent.insert(2, ());
        recent.insert(3, ());
        assert!(recent.contains(2) && recent.contains(3), "the fresh id stays when the stale one makes room");
    }

    #[test]
    fn a_value_is_made_once_while_it_is_remembered() {
        let recent = RecentIds::<u64>::new(4, None);
        let mut made = 0;
        for _ in 0..3 {
            recent.get_or_insert_with(5, || {
                made += 1;
                50
            });
        }
        assert_eq!(made, 1);
        assert_eq!(recent.get_or_insert_with(5, || 0), 50);
    }

    #[test]
    fn a_full_retry_list_keeps_what_it_owes() {
        let recent = RecentIds::<HashSet<u64>>::new(2, None);
        assert!(recent.extend(1, [10, 11]));
        assert!(recent.extend(2, [20]));
        assert!(!recent.extend(3, [30]), "no room for a third voucher");
        assert!(recent.extend(1, [12]), "an id already owed takes more");
        let mut owed = recent.take_all();
        owed.sort_by_key(|(id, _)| *id);
        assert_eq!(owed.len(), 2);
        assert_eq!(owed[0].1, HashSet::from([10, 11, 12]));
        assert_eq!(recent.len(), 0, "taken");
    }
}
