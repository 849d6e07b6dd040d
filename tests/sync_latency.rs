//! One latency whatever process writes (issue 40): a write answered on device A reaches
//! device B's `elfiee serve --sync --json` stream at once, whether it came through A's owner
//! socket from a CLI call or from an MCP server. Two serving processes (each `serve --json`)
//! on one `nats-server` on 127.0.0.1; 100 writes on A, 10 ms apart; the latency of each from
//! the write's answer to the line on B's stdout that carries it ([`elfiee::testkit::latency`],
//! which `elfiee-bench --only sync` measures with too).
//!
//! The bounds here are loose (a shared two-core test machine runs other tests beside these);
//! the strict figures (p50 ≤ 3 ms, p99 ≤ 10 ms) are the bench's `latency_process` and
//! `latency_mcp` (docs/PERFORMANCE.md). Before issue 40 such a write waited for the
//! publisher's one-second poll: p50 58 ms (CLI) and 250 ms (MCP), p99 955–967 ms here.

use std::time::Duration;

use elfiee::testkit::latency::{percentiles, ServedPair};
use elfiee_sync::testing::NatsServer;

const WRITES: usize = 100;
const APART: Duration = Duration::from_millis(10);

/// Well under the old one-second poll, with room for a loaded machine.
fn assert_prompt(how: &str, ms: &[f64]) {
    let (p50, p99, max) = percentiles(ms);
    eprintln!("{how}: p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms over {WRITES} writes");
    assert!(
        p50 < 25.0 && p99 < 150.0,
        "{how}: p50 {p50:.2} ms, p99 {p99:.2} ms (max {max:.2}): a write waits for something"
    );
}

fn pair(server: &NatsServer, dir: &tempfile::TempDir, doc: &str) -> ServedPair {
    ServedPair::start(
        env!("CARGO_BIN_EXE_elfiee").as_ref(),
        dir.path(),
        &server.url(),
        doc,
    )
    .unwrap()
}

#[test]
fn cli_writes_through_the_owner_socket_reach_the_other_device_at_once() {
    let server = NatsServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pair = pair(&server, &dir, "lat-cli");
    let ms = pair.cli_writes(WRITES, APART).unwrap();
    assert_prompt("CLI writes on A → B's serve --json", &ms);
}

#[test]
fn mcp_server_writes_reach_the_other_device_at_once() {
    let server = NatsServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pair = pair(&server, &dir, "lat-mcp");
    let ms = pair.mcp_writes(WRITES, APART).unwrap();
    assert_prompt("MCP server writes on A → B's serve --json", &ms);
}
