//! Synchronization primitives used by [`crate::commit_queue`]. The loom test
//! (`tests/loom_commit_queue.rs`) compiles the same queue source against loom's versions.
pub(crate) use std::sync::{Condvar, Mutex};
