//! Size bounds on a policy, so parsing, matching and proving stay cheap on hostile input.

/// Largest accepted policy document (YAML text or JSON), in bytes.
pub const MAX_DOCUMENT_BYTES: usize = 256 * 1024;
pub const MAX_NETWORK_POLICIES: usize = 256;
pub const MAX_ENDPOINTS_PER_POLICY: usize = 64;
pub const MAX_ENDPOINTS_TOTAL: usize = 1024;
pub const MAX_BINARIES_PER_POLICY: usize = 64;
pub const MAX_PORTS_PER_ENDPOINT: usize = 64;
/// Per endpoint, for `rules` and for `deny_rules` each.
pub const MAX_RULES_PER_ENDPOINT: usize = 128;
/// Paths in `read_only` and `read_write` together (upstream's limit).
pub const MAX_FILESYSTEM_PATHS: usize = 256;
/// Bytes in one filesystem path (upstream's limit).
pub const MAX_FILESYSTEM_PATH_LEN: usize = 4096;
/// Host, program and URL path globs.
pub const MAX_PATTERN_LEN: usize = 256;
/// `*` and `**` occurrences in one glob.
pub const MAX_WILDCARDS_PER_PATTERN: usize = 8;
pub const MAX_NAME_LEN: usize = 64;
/// `allowed_ips` networks per endpoint.
pub const MAX_ALLOWED_IPS_PER_ENDPOINT: usize = 64;
/// Query keys (and flattened JSON-RPC params) per rule.
pub const MAX_QUERY_KEYS: usize = 32;
/// `network_middlewares` entries (upstream's limit).
pub const MAX_MIDDLEWARES: usize = 10;
/// Include plus exclude host patterns per middleware.
pub const MAX_MIDDLEWARE_SELECTOR_PATTERNS: usize = 64;
