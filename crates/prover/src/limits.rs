//! What the prover accepts; larger inputs are `Unsupported` rather than slow.

/// Endpoints (summed over named rules) in either policy.
pub const MAX_ENDPOINTS: usize = 512;
/// Allow plus deny rules in either policy.
pub const MAX_L7_RULES: usize = 4096;
/// Program globs (summed over named rules) in either policy.
pub const MAX_BINARIES: usize = 1024;
/// Verdicts kept in the cache before it starts over.
pub const CACHE_CAPACITY: usize = 4096;
/// Boundaries built from stored versions kept before that cache starts over (one per
/// parent version a child was proved against lately, each as large as its policies).
pub const BOUNDARY_CACHE_CAPACITY: usize = 64;
/// Address classes `allowed_ips` may split the address space into (each costs one network
/// check).
pub const MAX_ADDRESS_CLASSES: usize = 64;
/// Query maps tried when a counterexample needs a query to replay.
pub const MAX_QUERY_TRIES: usize = 64;
/// Query classes (see `queries.rs`) before the prover falls back to approximating `query`.
pub const MAX_QUERY_CLASSES: usize = 64;
/// Kinds of values one query key may have before the same fallback.
pub const MAX_QUERY_KINDS: usize = 6;
/// Network checks (address classes times query classes) one check may run.
pub const MAX_NETWORK_CHECKS: usize = 256;
