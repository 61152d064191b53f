//! Verdicts by what the two policies are known as: a hit is one map lookup.
//!
//! The candidate is known by its hash (which the caller computes once anyway, to store it).
//! The boundary is known either by its own hash, or, when it was built by
//! [`crate::boundary`] from stored rows, by those rows' identities: rows that are never
//! changed, only superseded by a new version, so the identity changes whenever the content
//! can. Hashing a large boundary costs as much as a small proof; naming it costs nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use openshell_policy::Policy;

use crate::Verdict;
use crate::limits::{BOUNDARY_CACHE_CAPACITY, CACHE_CAPACITY};

/// What a verdict is cached under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CacheKey {
    pub boundary: BoundaryId,
    /// The candidate's [`Policy::hash`].
    pub candidate: [u8; 32],
}

impl CacheKey {
    /// Both policies by their hashes (costs two canonical forms and two SHA-256s).
    pub fn hashes(boundary: &Policy, candidate: &Policy) -> CacheKey {
        CacheKey { boundary: BoundaryId::Hash(boundary.hash()), candidate: candidate.hash() }
    }
}

/// Which boundary a verdict was proved against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BoundaryId {
    /// The boundary policy's [`Policy::hash`].
    Hash([u8; 32]),
    /// `crate::boundary(parent, global)` of these stored versions, where a version never
    /// changes once written (`sandbox_policies` and `global_max_policies` are append-only:
    /// a change is a new version). `parent` is `None` for a root, whose boundary is the
    /// global maximum alone.
    Stored { parent: Option<StoredPolicy>, global_version: i64 },
}

/// One stored version of a sandbox's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StoredPolicy {
    /// The sandbox's id.
    pub sandbox: [u8; 16],
    pub version: i64,
    /// The hash stored with that version, so even a reused (sandbox, version) pair, as a
    /// restored database could hold, names different content differently.
    pub hash: [u8; 32],
}

#[derive(Default)]
pub struct VerdictCache {
    map: Mutex<HashMap<CacheKey, Verdict>>,
}

impl VerdictCache {
    pub fn get(&self, key: &CacheKey) -> Option<Verdict> {
        self.lock().get(key).cloned()
    }

    pub fn insert(&self, key: CacheKey, v: Verdict) {
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

    fn lock(&self) -> MutexGuard<'_, HashMap<CacheKey, Verdict>> {
        // A panic elsewhere cannot leave a half-written verdict: insert is one call.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Boundaries built from stored versions, by [`BoundaryId::Stored`]: what every proof
/// against one parent version under one global maximum version needs first (two stored
/// documents parsed and intersected), done once for all of them. The same argument as for
/// verdicts makes the key safe: the rows it names never change.
#[derive(Default)]
pub struct BoundaryCache {
    map: Mutex<HashMap<BoundaryId, Arc<Policy>>>,
}

impl BoundaryCache {
    /// The boundary named `id`, built by `build` when it is not kept (outside the lock, so
    /// a slow build blocks no other proof; two at once may both build it). Only stored ids
    /// are kept: a boundary known by its hash is at hand already.
    pub fn get_or_build<E>(&self, id: BoundaryId, build: impl FnOnce() -> Result<Policy, E>) -> Result<Arc<Policy>, E> {
        let stored = matches!(id, BoundaryId::Stored { .. });
        if stored && let Some(b) = self.lock().get(&id) {
            return Ok(b.clone());
        }
        let built = Arc::new(build()?);
        if stored {
            let mut map = self.lock();
            if map.len() >= BOUNDARY_CACHE_CAPACITY {
                map.clear();
            }
            map.insert(id, built.clone());
        }
        Ok(built)
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<BoundaryId, Arc<Policy>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }
}
