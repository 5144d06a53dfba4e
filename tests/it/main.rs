//! The integration tests, one test binary: each file of this folder is a
//! module, so the library and the conformance suite are linked and
//! monomorphized once rather than once per file. `tests/tls.rs` is a binary of
//! its own because it sets `SSL_CERT_FILE` for its whole process.
//!
//! Run one file's tests with its module path as the filter:
//! `cargo test --profile ci --test it ha_cluster::`.
//!
//! The helper modules keep their folders beside this one (`tests/support`
//! also serves `tests/tls.rs`). Every test starts its own `redis-server` (and
//! sentinels or cluster nodes) on free loopback ports through `tests/support`.

#[path = "../support/mod.rs"]
mod support;

#[macro_use]
#[path = "../conformance/mod.rs"]
mod conformance;
#[path = "../examples_common/mod.rs"]
mod examples_common;
#[path = "../ha_common/mod.rs"]
mod ha_common;
#[path = "../worker_common/mod.rs"]
mod worker_common;

mod demo;
mod deploy;
mod embedded_index;
mod explain_cli;
mod faults;
mod golden;
mod ha_cluster;
mod ha_sentinel;
mod operator;
mod producers;
mod readers;
mod redis_index;
mod scan_cli;
mod schema;
mod support_smoke;
mod version_stamp;
mod worker_cli;
mod worker_process;
mod worker_streams;
