//! Test support: a real `nats-server` per test, and a relay that can cut a node off.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! let server = elfiee_sync::testing::NatsServer::start()?;
//! let relay = elfiee_sync::testing::Relay::start(server.addr()).await?;
//! // connect a node to relay.url(); relay.cut() partitions it, relay.restore() heals.
//! # Ok(()) }
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// Where `scripts/test` installs the server from Debian's packages.
const INSTALLED: &str = "/usr/sbin/nats-server";

/// A `nats-server` child process with JetStream, listening on 127.0.0.1 only, its store in a
/// temporary folder. Killed (by pid) when dropped.
pub struct NatsServer {
    child: Child,
    addr: SocketAddr,
    dir: tempfile::TempDir,
    /// The configuration file it was started with, if any.
    conf: Option<PathBuf>,
}

impl NatsServer {
    /// Starts a server on a free port (`-p -1`) and waits for its ports file.
    pub fn start() -> std::io::Result<NatsServer> {
        let dir = tempfile::tempdir()?;
        let (child, addr) = spawn(dir.path(), None, None)?;
        Ok(NatsServer {
            child,
            addr,
            dir,
            conf: None,
        })
    }

    /// Starts a server with `conf` as its configuration file (NATS syntax: `tls {…}`,
    /// `authorization {…}`, `cluster {…}`, `server_name`), on `port` (a free one when
    /// `None`), still on 127.0.0.1 with JetStream in a temporary folder. A server that
    /// cannot take the configuration fails with its own words.
    pub fn start_with(conf: &str, port: Option<u16>) -> std::io::Result<NatsServer> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("nats.conf");
        std::fs::write(&path, conf)?;
        let (child, addr) = spawn(dir.path(), port, Some(&path))?;
        Ok(NatsServer {
            child,
            addr,
            dir,
            conf: Some(path),
        })
    }

    /// `n` servers `n0`, `n1`, … on 127.0.0.1 routed to each other in one JetStream cluster
    /// (`elfiee-test`), each with its own store; streams may have up to `n` replicas.
    pub fn cluster(n: usize) -> std::io::Result<Vec<NatsServer>> {
        let routes = (0..n)
            .map(|_| {
                Ok(std::net::TcpListener::bind("127.0.0.1:0")?
                    .local_addr()?
                    .port())
            })
            .collect::<std::io::Result<Vec<u16>>>()?;
        (0..n)
            .map(|i| {
                let others: Vec<String> = (0..n)
                    .filter(|j| *j != i)
                    .map(|j| format!("nats-route://127.0.0.1:{}", routes[j]))
                    .collect();
                let conf = format!(
                    "server_name: n{i}\ncluster {{\n  name: elfiee-test\n  listen: 127.0.0.1:{}\n  routes: [{}]\n}}\n",
                    routes[i],
                    others.join(", ")
                );
                NatsServer::start_with(&conf, None)
            })
            .collect()
    }

    /// The folder the server keeps its store (and configuration) in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The client address (127.0.0.1 and the port the server picked).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server's process id (to read its CPU time from `/proc`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://{}", self.addr)
    }

    /// Kills the server (SIGKILL) and waits for it to die: what clients see of a broker
    /// crash. [`NatsServer::restart`] brings it back.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Kills the server (SIGKILL) and starts it again on the same port with the same store
    /// (and configuration): what clients see of a broker crash.
    pub fn restart(&mut self) -> std::io::Result<()> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let (child, addr) = spawn(
            self.dir.path(),
            Some(self.addr.port()),
            self.conf.as_deref(),
        )?;
        self.child = child;
        self.addr = addr;
        Ok(())
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The server to run: `ELFIEE_NATS_SERVER` when set, else Debian's, else `nats-server` on the
/// `PATH`.
fn binary() -> PathBuf {
    if let Some(b) = std::env::var_os("ELFIEE_NATS_SERVER") {
        return PathBuf::from(b);
    }
    if Path::new(INSTALLED).exists() {
        return PathBuf::from(INSTALLED);
    }
    PathBuf::from("nats-server")
}

fn spawn(
    dir: &Path,
    port: Option<u16>,
    conf: Option<&Path>,
) -> std::io::Result<(Child, SocketAddr)> {
    let ports = dir.join("ports");
    std::fs::create_dir_all(&ports)?;
    for old in std::fs::read_dir(&ports)? {
        let _ = std::fs::remove_file(old?.path());
    }
    let port = port.map_or("-1".to_string(), |p| p.to_string());
    let mut cmd = Command::new(binary());
    if let Some(conf) = conf {
        cmd.arg("-c").arg(conf);
    }
    let mut child = cmd
        .args(["-a", "127.0.0.1", "-p", &port, "-js", "-sd"])
        .arg(dir.join("store"))
        .arg("--ports_file_dir")
        .arg(&ports)
        .stdout(Stdio::null())
        .stderr(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join("server.log"))?,
        )
        .spawn()
        .map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("cannot start nats-server ({e}); install it with `apt-get install nats-server` (scripts/test does)"),
            )
        })?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(addr) = read_ports(&ports) {
            // The ports file is written once the listener is up.
            if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok((child, addr));
            }
        }
        if let Some(status) = child.try_wait()? {
            let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
            return Err(std::io::Error::other(format!(
                "nats-server exited at start ({status}): {log}"
            )));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err(std::io::Error::other(
                "nats-server did not write its ports file within 10 s",
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The client address in the server's ports file (`{"nats": ["nats://127.0.0.1:PORT"]}`).
fn read_ports(dir: &Path) -> Option<SocketAddr> {
    let entry = std::fs::read_dir(dir).ok()?.flatten().next()?;
    let text = std::fs::read_to_string(entry.path()).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let url = v.get("nats")?.get(0)?.as_str()?;
    // `nats://` or, with TLS configured, `tls://`.
    url.split_once("://")?.1.parse().ok()
}

/// A TCP relay on 127.0.0.1 between nodes and the broker. [`Relay::cut`] drops every
/// connection through it and refuses new ones until [`Relay::restore`]: a network partition
/// of the nodes that connect through it.
pub struct Relay {
    addr: SocketAddr,
    open: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<AbortHandle>>>,
    accept: AbortHandle,
}

impl Relay {
    /// Starts a relay to `target` on a free port. Needs a tokio runtime.
    pub async fn start(target: SocketAddr) -> std::io::Result<Relay> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let open = Arc::new(AtomicBool::new(true));
        let conns: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let accept = tokio::spawn({
            let (open, conns) = (open.clone(), conns.clone());
            async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    if !open.load(Ordering::Acquire) {
                        drop(inbound);
                        continue;
                    }
                    let task = tokio::spawn(async move {
                        if let Ok(mut outbound) = TcpStream::connect(target).await {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    });
                    let mut list = conns.lock().unwrap_or_else(|p| p.into_inner());
                    list.retain(|h| !h.is_finished());
                    list.push(task.abort_handle());
                }
            }
        })
        .abort_handle();
        Ok(Relay {
            addr,
            open,
            conns,
            accept,
        })
    }

    /// `nats://127.0.0.1:PORT` of the relay.
    pub fn url(&self) -> String {
        format!("nats://{}", self.addr)
    }

    /// Drops every connection and refuses new ones.
    pub fn cut(&self) {
        self.open.store(false, Ordering::Release);
        for h in self
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            h.abort();
        }
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.open.store(true, Ordering::Release);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}
