//! What the prover accepts; larger inputs are `Unsupported` rather than slow.

/// Endpoints (summed over named rules) in either policy.
pub const MAX_ENDPOINTS: usize = 512;
/// Allow plus deny rules in either policy.
pub const MAX_L7_RULES: usize = 4096;
/// Program globs (summed over named rules) in either policy.
pub const MAX_BINARIES: usize = 1024;
/// Verdicts kept in the cache before it starts over.
pub const CACHE_CAPACITY: usize = 4096;
/// Address classes `allowed_ips` may split the address space into (each costs one network
/// check).
pub const MAX_ADDRESS_CLASSES: usize = 64;
/// Query maps tried when a counterexample needs a query to replay.
pub const MAX_QUERY_TRIES: usize = 64;
