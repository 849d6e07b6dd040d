//! Helpers shared by the root integration tests (each test uses some of them).

#![allow(dead_code)]

use std::io::Write;
use std::sync::{Arc, Mutex};

/// A `tracing_subscriber` writer that keeps everything written to it.
#[derive(Clone, Default)]
pub struct Captured(pub Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// Everything captured so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs the `elfiee` binary on `elf` with `args` (and `RUST_LOG` unset, so stderr holds only
/// what the command itself says), with the extra environment variables `env`.
pub fn run_elfiee(
    elf: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_elfiee"))
        .args(args)
        .env("ELFIEE_ELF", elf)
        .envs(env.iter().copied())
        .env_remove("RUST_LOG")
        .output()
        .expect("run elfiee")
}

/// The JSON a successful run printed; panics with its stderr when it failed.
pub fn success_json(args: &[&str], out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?}: stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}
