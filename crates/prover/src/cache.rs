//! Verdicts by (boundary hash, candidate hash): equal policies hash equal, so a repeated
//! check is a map lookup.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::Verdict;
use crate::limits::CACHE_CAPACITY;

type Key = ([u8; 32], [u8; 32]);

#[derive(Default)]
pub struct VerdictCache {
    map: Mutex<HashMap<Key, Verdict>>,
}

impl VerdictCache {
    pub fn get(&self, key: &Key) -> Option<Verdict> {
        self.lock().get(key).cloned()
    }

    pub fn insert(&self, key: Key, v: Verdict) {
        let mut map = self.lock();
        // Bounded without bookkeeping: starting over costs only re-proving.
        if map.len() >= CACHE_CAPACITY {
            map.clear();
        }
        map.insert(key, v);
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Verdict>> {
        // A panic elsewhere cannot leave a half-written verdict: insert is one call.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }
}
