//! The Elfiee benchmarks' library: a deterministic generator of realistic source trees
//! ([`project_gen`]), used by `elfiee-bench` (this crate's binary) and by the workspace's
//! tests of folder import and sync. The benchmark itself is `src/main.rs`; see
//! docs/PERFORMANCE.md for how to run it.

pub mod project_gen;
