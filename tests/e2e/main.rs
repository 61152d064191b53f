//! The end-to-end suite: a real gateway, database and sandboxes, one module per area, built as
//! one test binary so the whole stack links once. Suites that run on both real drivers take the
//! driver as a test case ([`openshell_e2e::Backend`]): `cargo test -p openshell-e2e container`
//! runs the container driver's cases.

mod audit_chain;
mod auth_budget;
mod authz;
mod bad_input;
mod child_files;
mod children;
mod cli_example;
mod concurrency;
mod container;
mod create_env;
mod db_outage;
mod disk;
mod door;
mod door_attacks;
mod egress;
mod embedded;
mod escape;
mod failover;
mod first_day;
mod grant_program;
mod idle_stop;
mod interop;
mod lifecycle;
mod limits;
mod mcp_conformance;
mod mcp_door;
mod mcp_examples;
mod mcp_guards;
mod mcp_host;
mod mcp_recipes;
mod mcp_schemas;
mod mcp_walk_ts;
mod metrics;
mod operator_sql;
mod pi_agent;
mod policies;
mod proof_bounds;
mod proposals;
mod push;
mod python_sdk;
mod ready;
mod rootless;
mod rootless_refusals;
mod run_lock;
mod state_layout;
mod storm;
mod upstream_policies;
mod watch;
