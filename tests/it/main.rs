//! dsv's integration tests: one binary (see `Cargo.toml`, `autotests = false`), one module
//! per area. Every test runs the real `dsv` binary or library on real directories and real
//! SQLite files in a temp dir.

mod common;

mod architecture_docs;
mod attacks4;
mod audit;
mod bad_input;
mod cache_limit;
mod checkout_plan;
mod checkout_safety;
mod cleanup;
mod cli_docs;
mod cli_output;
mod clock;
mod concurrency;
mod copy;
mod crash;
mod deltas_commit;
mod docs_names;
mod faults;
mod forged;
mod guards;
mod hardening;
mod hostile;
mod import;
mod import_bounds;
mod lineage;
mod local_store;
mod messages;
mod mount;
mod nearest;
mod pipeline;
mod properties;
mod read;
mod real_data;
mod remote;
mod remote_gc;
mod remote_order;
mod round3;
mod round4_output;
mod round4_workflow;
mod sandbox;
mod scale;
mod scale_input;
mod settings;
mod stall;
mod streaming;
mod sync_plans;
mod teamwork;
mod terminal;
mod trust;
mod usage_exits;
mod workflow;
