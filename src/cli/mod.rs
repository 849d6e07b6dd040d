//! The `elfiee` command line: argument definitions, dispatch, and the entry points a binary
//! calls. See docs/CLI.md.
//!
//! The `elfiee` binary is [`main`]. A program with its own capabilities (its own block types)
//! gets the whole command line over them with [`main_with`] (the process arguments) or
//! [`main_from`] (arguments it chooses):
//!
//! ```
//! use std::process::ExitCode;
//! use elfiee::capabilities::Registry;
//! use elfiee::EngineConfig;
//!
//! let registry = Registry::builtin();
//! // registry.register(std::sync::Arc::new(MyCapability)); …
//! let config = EngineConfig { registry, ..Default::default() };
//! // `my-tool caps`: prints the capabilities the program knows, one a line.
//! let code = elfiee::cli::main_from(config, Default::default(), ["my-tool", "caps"]);
//! assert_eq!(code, ExitCode::SUCCESS);
//! ```

mod commands;
mod graph;
mod output;
mod resolve;
mod session;
mod sync;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::{Engine, EngineConfig};

pub(crate) use commands::hook_before_runtime;
pub use commands::run;
pub use output::CliError;

/// The `elfiee` binary: [`main_with`] the default engine configuration (the built-in
/// capabilities).
pub fn main() -> ExitCode {
    main_with(EngineConfig::default())
}

/// The whole `elfiee` command line over an engine made with `config`, on the process
/// arguments — an embedder's binary passes `EngineConfig { registry: its_registry,
/// ..Default::default() }` and every command (`caps`, `exec`, `replay`, `verify`, the MCP
/// server, …) serves its capabilities and folds.
///
/// Usage lines name the program as it was started; `--version` says `elfiee`, this crate's
/// version and the commit it was built from ([`VERSION`]). Logs go to stderr filtered by
/// `RUST_LOG` (default `warn`; kept if the program already installed a subscriber). It makes
/// `config` the process-wide engine ([`Engine::set_global`]), runs the command on a new tokio
/// runtime and returns its exit code (0 done, 1 rejected, 2 usage). Call it before anything
/// uses [`Engine::global`]: otherwise it refuses with exit code 1.
///
/// ```
/// use std::process::ExitCode;
/// use elfiee::capabilities::Registry;
/// use elfiee::EngineConfig;
///
/// // The `main` of a program with its own block types:
/// fn my_main() -> ExitCode {
///     let registry = Registry::builtin();
///     // registry.register(std::sync::Arc::new(MyCapability)); …
///     elfiee::cli::main_with(EngineConfig { registry, ..Default::default() })
/// }
///
/// // rustdoc runs this example without arguments: a usage error (on stderr), exit code 2.
/// assert_eq!(my_main(), ExitCode::from(2));
/// ```
pub fn main_with(config: EngineConfig) -> ExitCode {
    main_with_effects(config, crate::adapters::effects::EffectSet::new())
}

/// [`main_with`], with the program's own effects run beside the built-in ones by every
/// command that opens a document (see docs/EMBEDDING.md, "Your own block types").
pub fn main_with_effects(
    config: EngineConfig,
    effects: crate::adapters::effects::EffectSet,
) -> ExitCode {
    main_from(config, effects, std::env::args_os())
}

/// [`main_with_effects`] on the arguments `args` (the first is the program's name, as in
/// `std::env::args_os()`) instead of the process's: for a program that builds its command
/// line itself, and for examples and tests. `--help` and `--version` print and return 0, a
/// usage error prints and returns 2, as the process-argument entry points do. Once per
/// process: the engine it makes is the process-wide one.
pub fn main_from<I, T>(
    mut config: EngineConfig,
    effects: crate::adapters::effects::EffectSet,
    args: I,
) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    // The command line carries sync (`serve --sync`, `sync add-node`): its capability
    // (`node.add`, the file owner lets another device write) joins whatever registry the
    // program built, as the built-in program's does (issue 27: a layer brings its own
    // capabilities wherever it is switched on).
    if config.registry.get("node.add").is_none() {
        elfiee_sync::membership::register(&mut config.registry);
    }
    let _ = EXTRA_EFFECTS.set(effects);
    let args = match Cli::try_parse_from(args) {
        Ok(args) => args,
        Err(e) => {
            // What `Cli::parse` would print (help and version on stdout, errors on stderr),
            // without leaving the process.
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    // A Claude Code hook hands its payload to the document's owner before anything else is
    // set up (logging, the runtime, the engine): most hook calls end there (issue 37, "Fast").
    if let Cmd::Hook { editor } = &args.cmd {
        hook_before_runtime(&args, editor);
    }
    // sled's own log lines are not for the user: the engine reports what they are about (a
    // damaged file) as an error that says what to do, and the first line on stderr must be
    // that `error: …` (issue 39, F8). The NATS client's own lines likewise: sync says in its
    // own words what the broker refused or why it is offline. The content store's warnings
    // are about what it mends itself (a torn index tail cut off); where that is damage, the
    // command's error says so. `RUST_LOG` still shows them.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "warn,sled=off,async_nats=off,elfiee_engine::content=error".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
    quiet_sled_panics();
    let json = args.json;
    if config.auto_backup.is_none() {
        match auto_backup_from_env() {
            Ok(auto) => config.auto_backup = auto,
            Err(e) => {
                e.report(json);
                return ExitCode::from(e.code());
            }
        }
    }
    if !Engine::set_global(config) {
        let e = CliError::failed(
            "engine_in_use",
            "the process-wide engine was already in use, so the given configuration (its \
             registry) cannot apply; call elfiee::cli::main_with before anything uses \
             Engine::global()",
        );
        e.report(json);
        return ExitCode::from(e.code());
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            e.report(json);
            ExitCode::from(e.code())
        }
    }
}

/// The effects [`main_with_effects`] was given (none for the plain `elfiee`).
static EXTRA_EFFECTS: std::sync::OnceLock<crate::adapters::effects::EffectSet> =
    std::sync::OnceLock::new();

/// The effects config the CLI attaches: the defaults plus the program's own effects.
/// The automatic backup the environment asks for: `ELFIEE_AUTO_BACKUP_EVERY=N` (events; 0 or
/// unset: off) and `ELFIEE_AUTO_BACKUP_DIR=PATH` (default: beside each document).
fn auto_backup_from_env() -> Result<Option<crate::engine::AutoBackup>, CliError> {
    let every = match std::env::var("ELFIEE_AUTO_BACKUP_EVERY") {
        Err(_) => return Ok(None),
        Ok(v) => v.trim().parse::<u64>().map_err(|_| {
            CliError::usage(format!(
                "ELFIEE_AUTO_BACKUP_EVERY is '{v}'; give a number of events (e.g. 1000), or 0 to turn the automatic backup off"
            ))
        })?,
    };
    if every == 0 {
        return Ok(None);
    }
    let dir = std::env::var_os("ELFIEE_AUTO_BACKUP_DIR").map(std::path::PathBuf::from);
    if let Some(d) = dir.as_ref().filter(|d| !d.is_dir()) {
        return Err(CliError::usage(format!(
            "ELFIEE_AUTO_BACKUP_DIR is {}, which is not a folder; create it or point it at one",
            d.display()
        )));
    }
    Ok(Some(crate::engine::AutoBackup {
        every_events: every,
        dir,
    }))
}

pub(crate) fn effects_config() -> crate::adapters::EffectsConfig {
    crate::adapters::EffectsConfig {
        extra: EXTRA_EFFECTS.get().cloned().unwrap_or_default(),
        ..Default::default()
    }
}

/// The program's name as it was started (the file name of argv[0]), else `elfiee`.
pub(crate) fn program_name() -> String {
    std::env::args_os()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .and_then(|f| f.to_str())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "elfiee".into())
}

/// What `elfiee --version` prints after the name: this crate's version and the commit it was
/// built from (build.rs: the git checkout's HEAD, the packaged crate's `.cargo_vcs_info.json`,
/// or `ELFIEE_BUILD_COMMIT`; `unknown` when none says).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("ELFIEE_BUILD_COMMIT"),
    ")"
);

/// A parsed `elfiee` command line. Parse one with `clap::Parser`
/// (`Cli::try_parse_from(["elfiee", "--elf", "notes.elf", "verify"])`) and run it with [`run`]
/// on a runtime whose [`Engine::global`] is set up; [`main_from`] does both. What it accepts
/// is `elfiee --help` and docs/CLI.md; its parts are this module's own.
#[derive(Parser, Debug)]
#[command(
    name = "elfiee",
    version = VERSION,
    about,
    long_about = None,
    propagate_version = true
)]
pub struct Cli {
    /// The .elf document to work on.
    #[arg(long, global = true, env = "ELFIEE_ELF", value_name = "PATH")]
    pub(crate) elf: Option<PathBuf>,
    /// Act as this editor (id or unique name); default: the file's owner.
    #[arg(long = "as", global = true, value_name = "EDITOR_ID")]
    pub(crate) as_editor: Option<String>,
    /// Print machine-readable JSON on stdout.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

#[derive(Args, Debug)]
pub(crate) struct ServeArgs {
    /// Also sync the document with other devices through this NATS JetStream broker
    /// (nats://HOST:PORT, or tls://HOST:PORT). Local commands never wait for it.
    #[arg(long, value_name = "URL")]
    pub(crate) sync: Option<String>,
    /// The document's name on the broker (default: the name it was last synced under, else
    /// the file's name). Letters, digits, '-' and '_'.
    #[arg(long, value_name = "NAME", requires = "sync")]
    pub(crate) doc: Option<String>,
    /// This device's key file (made when missing).
    #[arg(long, env = "ELFIEE_NODE_KEY", value_name = "FILE", default_value_os_t = sync::default_key_path())]
    pub(crate) key: PathBuf,
    /// Copies of the document's stream the broker keeps (a NATS cluster: up to its size),
    /// set when this device creates the stream.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "sync", value_parser = clap::value_parser!(u8).range(1..=5))]
    pub(crate) replicas: u8,
    #[command(flatten)]
    pub(crate) broker: BrokerArgs,
}

/// TLS and credentials for a locked broker (`serve --sync`, `sync join`, `sync status`). Never
/// written into the `.elf` and never printed; each has an `ELFIEE_SYNC_*` variable.
#[derive(Args, Clone, Default)]
pub(crate) struct BrokerArgs {
    /// The broker user (also `nats://USER:PASSWORD@HOST:PORT`).
    #[arg(long, env = "ELFIEE_SYNC_USER", value_name = "NAME")]
    pub(crate) user: Option<String>,
    /// The broker user's password.
    #[arg(
        long,
        env = "ELFIEE_SYNC_PASSWORD",
        value_name = "PASSWORD",
        hide_env_values = true
    )]
    pub(crate) password: Option<String>,
    /// A broker token (also `nats://TOKEN@HOST:PORT`).
    #[arg(
        long,
        env = "ELFIEE_SYNC_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub(crate) token: Option<String>,
    /// A NATS credentials file (user JWT and nkey seed, as `nsc` writes it).
    #[arg(long, env = "ELFIEE_SYNC_CREDS", value_name = "FILE")]
    pub(crate) creds: Option<PathBuf>,
    /// A file holding a user nkey seed (SU…), for brokers that list users by nkey.
    #[arg(long, env = "ELFIEE_SYNC_NKEY", value_name = "FILE")]
    pub(crate) nkey: Option<PathBuf>,
    /// The CA certificates (PEM) that signed the broker's certificate, instead of the system
    /// roots; TLS is then required (as with a tls:// URL).
    #[arg(long, env = "ELFIEE_SYNC_TLS_CA", value_name = "FILE")]
    pub(crate) tls_ca: Option<PathBuf>,
    /// A client certificate (PEM), for brokers that verify clients (with --tls-key).
    #[arg(
        long,
        env = "ELFIEE_SYNC_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub(crate) tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(
        long,
        env = "ELFIEE_SYNC_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub(crate) tls_key: Option<PathBuf>,
}

/// Names what is given, never a secret (as `BrokerAccess` does).
impl std::fmt::Debug for BrokerArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.access().fmt(f)
    }
}

impl BrokerArgs {
    pub(crate) fn access(&self) -> elfiee_sync::node::BrokerAccess {
        elfiee_sync::node::BrokerAccess {
            user: self.user.clone(),
            password: self.password.clone(),
            token: self.token.clone(),
            creds: self.creds.clone(),
            nkey: self.nkey.clone(),
            tls_ca: self.tls_ca.clone(),
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
            require_tls: false,
        }
    }
}

#[derive(Subcommand, Debug)]
pub(crate) enum SyncCmd {
    /// Print this device's node id (its public key), making the key file when missing.
    NodeId {
        #[arg(long, env = "ELFIEE_NODE_KEY", value_name = "FILE", default_value_os_t = sync::default_key_path())]
        key: PathBuf,
    },
    /// Create an empty document at PATH that receives an existing one from the broker. The
    /// owner then adds this device (`elfiee sync add-node NODE_ID` on a device that has the
    /// document), and `elfiee serve --sync URL` here fetches it and keeps it in step.
    Join {
        path: PathBuf,
        /// The broker (nats://HOST:PORT or tls://HOST:PORT).
        #[arg(long, value_name = "URL")]
        broker: String,
        /// The document's name on the broker.
        #[arg(long, value_name = "NAME")]
        doc: String,
        #[arg(long, env = "ELFIEE_NODE_KEY", value_name = "FILE", default_value_os_t = sync::default_key_path())]
        key: PathBuf,
        #[command(flatten)]
        broker_access: BrokerArgs,
    },
    /// Let a device read and write this document (file owner only; it gets the document
    /// key); NODE_ID is what `elfiee sync node-id` prints on that device.
    AddNode {
        node_id: String,
        /// A name to show for the device.
        #[arg(long)]
        name: Option<String>,
    },
    /// Take a device out of this document (file owner only): what it wrote stays, what it
    /// writes from now on is refused on every device, and a new document key is sealed to
    /// the devices that stay, so it cannot read what follows.
    RemoveNode { node_id: String },
    /// The node, the broker, and how far each side is behind (asks the broker when it can).
    Status {
        #[arg(long, env = "ELFIEE_NODE_KEY", value_name = "FILE", default_value_os_t = sync::default_key_path())]
        key: PathBuf,
        #[command(flatten)]
        broker_access: BrokerArgs,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum Cmd {
    /// Undo your own newest edits to the document (`--as` editor; default the owner): each
    /// command's blocks back to what they were before it (compensating events; the log stays
    /// append-only). Refused, naming them, when someone else changed those blocks since.
    Undo {
        /// How many of your newest edits (default 1; at least 1).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
        steps: u64,
        /// Overwrite blocks changed since by someone else.
        #[arg(long)]
        force: bool,
    },
    /// Bring back what your newest `undo` took back (not after a new edit of yours).
    Redo {
        /// Overwrite blocks changed since by someone else.
        #[arg(long)]
        force: bool,
    },
    /// Create a new .elf document.
    Init {
        path: PathBuf,
        /// Display name of the owner (its id is the name in lower case).
        #[arg(long, default_value = "owner")]
        owner: String,
    },
    /// Manage editors (identities).
    #[command(subcommand)]
    Editor(EditorCmd),
    /// Create, inspect, link and delete blocks.
    #[command(subcommand)]
    Block(BlockCmd),
    /// Read or write a markdown block.
    #[command(subcommand)]
    Markdown(MarkdownCmd),
    /// Read or write a code block.
    #[command(subcommand)]
    Code(CodeCmd),
    /// Grant EDITOR (or '*') the capability CAP on BLOCK (or '*').
    Grant(GrantArgs),
    /// Revoke a grant.
    Revoke(GrantArgs),
    /// Print committed events, oldest first.
    Log {
        /// Only events about this block, each with the full content it set.
        #[arg(long)]
        block: Option<String>,
        /// Only the last N events.
        #[arg(long)]
        tail: Option<usize>,
    },
    /// Rebuild the state from the log alone and print its digest.
    Replay,
    /// Print the digest of the state as the engine opens it (snapshot + tail).
    StateDigest,
    /// Check the hash chain, the command index and the snapshot; exit 1 on any problem.
    Verify,
    /// List the capabilities this program knows (its registry).
    Caps,
    /// Copy the document into one backup file, while it is in use: the first run writes
    /// every event and body, each later run against the same file appends only what is new.
    Backup {
        /// The backup file (default: NAME.elf.backup beside the document).
        #[arg(long, value_name = "FILE")]
        to: Option<std::path::PathBuf>,
    },
    /// Recover what can be proven of a damaged document into a new one: the events whose
    /// hash chain holds from the start, then its newest backup, then what is readable past
    /// it; prints the seq ranges lost and why. The damaged document is not changed.
    Salvage {
        /// The damaged document.
        #[arg(value_name = "DAMAGED_ELF")]
        damaged: std::path::PathBuf,
        /// The new document to create (must not exist).
        #[arg(value_name = "NEW_ELF")]
        new: std::path::PathBuf,
        /// The backup to use (default: NAME.elf.backup beside the damaged document, or
        /// ELFIEE_AUTO_BACKUP_DIR's).
        #[arg(long, value_name = "FILE")]
        backup: Option<std::path::PathBuf>,
    },
    /// Rebuild a document from a backup file (the newest point it holds), checking every
    /// event's hash chain and every body.
    Restore {
        /// The backup file (written by `elfiee backup`).
        #[arg(value_name = "BACKUP")]
        backup: std::path::PathBuf,
        /// The new document to create (must not exist).
        #[arg(value_name = "NEW_ELF")]
        new: std::path::PathBuf,
    },
    /// Run one command of any capability the program knows (see `caps`), as the --as editor.
    Exec(ExecArgs),
    /// Draw the relation graph (blocks and their reference / implement relations) as DOT,
    /// Mermaid or SVG; with --json print its nodes and edges.
    Graph(GraphArgs),
    /// Import a folder as a directory block, or export one back.
    #[command(subcommand)]
    Dir(DirCmd),
    /// Terminals: run shell commands in a project folder, output recorded as events.
    #[command(subcommand)]
    Terminal(TerminalCmd),
    /// Agents: Claude Code integration (with --target) or LLM-only agents.
    #[command(subcommand)]
    Agent(AgentCmd),
    /// Keep the document open for other processes (and run its effects) until Ctrl-C; with
    /// --json, print every committed event as a JSON line.
    Serve(ServeArgs),
    /// Several devices on one document through a NATS JetStream broker: this device's node
    /// id, joining a document, adding a device, and how far the sync is behind.
    #[command(subcommand)]
    Sync(SyncCmd),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions { shell: clap_complete::Shell },
    /// Print the man page (roff), or with --dir write one page per command into DIR
    /// (elfiee.1, elfiee-block.1, elfiee-block-create.1, …).
    Man {
        /// Write every command's page into this folder instead of printing the top one.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Record one Claude Code hook call (what the hooks `agent enable` installs run): reads
    /// the hook's JSON on stdin, records it in the document as the agent's (a step per tool
    /// call that can change files), and answers a `PreToolUse` the grants refuse with a
    /// denial. Never blocks Claude Code otherwise.
    Hook {
        /// The agent's editor id (from the hook entry).
        #[arg(long)]
        editor: String,
    },
    /// Serve the document over MCP on stdin/stdout (what Claude Code starts).
    McpServer {
        /// Act as this editor (default: the file owner); agent entries pass their editor id.
        #[arg(long)]
        editor: Option<String>,
    },
}

#[derive(Args, Debug)]
pub(crate) struct ExecArgs {
    /// Capability id, e.g. markdown.write (`elfiee caps` lists them).
    #[arg(value_name = "CAP")]
    pub(crate) cap: String,
    /// The block the command targets: an id, a unique id prefix or a unique name ('*' or
    /// none: the whole file).
    #[arg(long, value_name = "ID")]
    pub(crate) block: Option<String>,
    /// The command's payload: JSON, `@FILE` to read it from a file, or `-` for stdin
    /// (default `{}`).
    #[arg(long, value_name = "JSON", allow_hyphen_values = true)]
    pub(crate) payload: Option<String>,
}

#[derive(Args, Debug)]
pub(crate) struct GraphArgs {
    /// Only the blocks related to this one (directly or through others, in either direction).
    #[arg(long, value_name = "BLOCK")]
    pub(crate) from: Option<String>,
    /// With --from: at most N relation steps away (default: no limit).
    #[arg(long, value_name = "N", requires = "from")]
    pub(crate) depth: Option<usize>,
    /// dot | mermaid | svg (default: from the -o file's extension, else dot).
    #[arg(long, value_enum)]
    pub(crate) format: Option<GraphFormat>,
    /// Write the picture to this file instead of stdout (.svg, .dot/.gv, .mmd/.mermaid pick
    /// the format).
    #[arg(short = 'o', long, value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GraphFormat {
    Dot,
    Mermaid,
    Svg,
}

#[derive(Subcommand, Debug)]
pub(crate) enum DirCmd {
    /// Import a folder, streamed in chunks (honours .gitignore/.ignore; skips .git, target,
    /// node_modules, .elf, binary and oversize files). Running it again on a folder whose
    /// import was interrupted resumes that import.
    Import {
        path: PathBuf,
        #[arg(long)]
        name: Option<String>,
        /// Largest file imported, in bytes (default 1048576; at most 8388608).
        #[arg(long)]
        max_file_bytes: Option<u64>,
    },
    /// Rescan a directory block's folder: events only for changed, added and deleted files.
    Sync {
        id: String,
        /// Largest file imported, in bytes (default 1048576; at most 8388608).
        #[arg(long)]
        max_file_bytes: Option<u64>,
    },
    /// Write the files the document changed back under the directory's folder: new and
    /// edited files, renames and removals. A file changed on disk since the document last saw
    /// it is reported, not overwritten (unless --force).
    Export {
        id: String,
        /// Print what the export would do and write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Overwrite (or remove) files changed on disk since the last import or export.
        #[arg(long)]
        force: bool,
    },
    /// What the directory holds that its folder does not have yet: new, modified and removed
    /// files (from the document alone; nothing on disk is read).
    Status { id: String },
    /// Make a new file in the directory at PATH (relative), or place an existing block there.
    Add {
        id: String,
        path: String,
        /// The file's text (default: empty).
        #[arg(long, conflicts_with_all = ["file", "block"])]
        text: Option<String>,
        /// Read the file's text from this file.
        #[arg(long, conflicts_with = "block")]
        file: Option<PathBuf>,
        /// Place this existing markdown or code block at PATH instead.
        #[arg(long)]
        block: Option<String>,
    },
    /// Move (rename) a file of the directory; the export renames it on disk.
    Mv {
        id: String,
        from: String,
        to: String,
    },
    /// Remove a file from the directory (its block too, unless --keep-block); the export
    /// removes it on disk.
    Rm {
        id: String,
        path: String,
        #[arg(long)]
        keep_block: bool,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum TerminalCmd {
    /// Create a terminal block.
    Create {
        #[arg(long)]
        name: String,
        /// Directory block whose folder is the working directory.
        #[arg(long)]
        dir: Option<String>,
        /// Shell that runs commands as `<shell> -c CMD` (default sh).
        #[arg(long)]
        shell: Option<String>,
    },
    /// Run a command and print its output (exit code of the run is reported, not returned).
    /// When the terminal's linked directory holds changes not exported yet, asks on a
    /// terminal "export & run / run / cancel"; scripts pass --export or --no-export.
    Run {
        id: String,
        /// Seconds before the command is killed (default 120).
        #[arg(long)]
        timeout: Option<u64>,
        /// Export the linked directory's changes first.
        #[arg(long, conflicts_with = "no_export")]
        export: bool,
        /// Run without exporting the linked directory's changes.
        #[arg(long)]
        no_export: bool,
        /// Keep the choice (--export / --no-export, or the answer) for this terminal.
        #[arg(long)]
        remember: bool,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

/// What the agent loop may do without asking.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct LoopPermissions {
    /// build (every tool; reads run without asking, the rest by the rules) or plan (read
    /// only), explore, general.
    #[arg(long, default_value = "build")]
    pub(crate) profile: String,
    /// read_only, supervised (rules decide, unmatched calls ask) or full (everything not
    /// denied runs); default: the profile's.
    #[arg(long)]
    pub(crate) autonomy: Option<String>,
    /// Permission rules to add after the profile's and the agent's own: a JSON file
    /// `[{"permission": TOOL, "pattern": GLOB, "action": "allow" | "deny" | "ask"}]`.
    #[arg(long)]
    pub(crate) rules: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub(crate) enum AgentCmd {
    /// Create an agent; with --target it integrates Claude Code into that directory's project.
    Create {
        #[arg(long)]
        target: Option<String>,
        #[arg(long)]
        name: Option<String>,
    },
    /// Enable an agent (install the skill link, MCP server entry and approval).
    Enable { id: String },
    /// Disable an agent (remove exactly what enable added).
    Disable { id: String },
    /// List agents.
    List,
    /// Configure an agent's LLM (partial update; the key stays in the environment variable).
    Configure {
        id: String,
        /// anthropic | openai
        #[arg(long)]
        provider: Option<String>,
        #[arg(long)]
        model: Option<String>,
        /// Name of the environment variable holding the API key (checked now, read at call time).
        #[arg(long)]
        api_key_env: Option<String>,
        #[arg(long)]
        system_prompt: Option<String>,
        #[arg(long)]
        max_context_tokens: Option<u64>,
        /// Provider base URL (default from ANTHROPIC_BASE_URL / OPENAI_BASE_URL).
        #[arg(long)]
        base_url: Option<String>,
        /// Sampling temperature 0-2 (a negative value clears it).
        #[arg(long, allow_negative_numbers = true)]
        temperature: Option<f64>,
        /// Reply language (zh, en, …); zh also makes the tool-result markers Chinese.
        #[arg(long)]
        language: Option<String>,
        /// The agent's default permission rules for `agent run` / `agent chat`: a JSON file
        /// `[{"permission": TOOL, "pattern": GLOB, "action": "allow" | "deny" | "ask"}]`.
        #[arg(long)]
        rules: Option<PathBuf>,
        /// A knowledge seed: a standing fact always recalled into the agent loop's system
        /// prompt (repeatable; the given ones replace the agent's list, at most 32 of at most
        /// 1000 characters).
        #[arg(
            long = "knowledge",
            value_name = "TEXT",
            conflicts_with = "clear_knowledge"
        )]
        knowledge: Vec<String>,
        /// Forget every knowledge seed.
        #[arg(long)]
        clear_knowledge: bool,
    },
    /// Ask an LLM agent for a proposal: streams its answer, then prints the proposal.
    Invoke {
        id: String,
        #[arg(long)]
        prompt: String,
        /// Extra blocks to start the context from (repeatable).
        #[arg(long = "context")]
        context: Vec<String>,
    },
    /// One non-interactive turn of the agent loop (tools run as the agent, through CBAC);
    /// prints each tool call and the turn's steps on stderr as `agent chat` does, and fails
    /// (exit 1) when the model call failed.
    Run {
        id: String,
        #[arg(long)]
        message: String,
        /// Continue this session (printed by earlier runs).
        #[arg(long)]
        session: Option<String>,
        /// Answer every confirmation with yes.
        #[arg(long, conflicts_with = "deny_all")]
        approve_all: bool,
        /// Answer every confirmation with no (the default without a terminal).
        #[arg(long)]
        deny_all: bool,
        /// Tool calls per turn (default 10).
        #[arg(long)]
        max_iterations: Option<usize>,
        #[command(flatten)]
        perms: LoopPermissions,
    },
    /// Talk with an agent interactively (empty line or Ctrl-D ends); y/N/a answers confirmations.
    Chat {
        id: String,
        /// Continue this session.
        #[arg(long)]
        session: Option<String>,
        #[command(flatten)]
        perms: LoopPermissions,
    },
    /// List an agent's agent-loop sessions (id and title), oldest first.
    Sessions { id: String },
    /// List the steps (checkpoints) of an agent session: what each changed in the document
    /// and in the project folder, and whether it is done or undone.
    Steps {
        /// A session id, a unique start of one, or an agent (name, block id or editor id)
        /// for the session it worked in last.
        session: String,
    },
    /// Undo steps of an agent session, in the document (compensating events) and in the
    /// project folder (files restored byte for byte; files a step made or changed in a
    /// directory go with it, whoever exported them). Default: the newest step.
    Undo {
        /// A session id, a unique start of one, or an agent (name, block id or editor id)
        /// for the session it worked in last.
        session: String,
        /// Undo every step after this one.
        #[arg(long, conflicts_with = "steps")]
        to: Option<u64>,
        /// Undo the newest N steps not undone yet (at least 1).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        steps: Option<u64>,
        /// Overwrite blocks and files changed since by someone else.
        #[arg(long)]
        force: bool,
    },
    /// Redo the steps the newest undo of an agent session took back.
    Redo {
        /// A session id, a unique start of one, or an agent (name, block id or editor id)
        /// for the session it worked in last.
        session: String,
        /// Overwrite blocks and files changed since by someone else.
        #[arg(long)]
        force: bool,
    },
    /// List an agent's proposals.
    Proposals { id: String },
    /// Approve a pending proposal: its commands run as the agent, all or nothing.
    Approve { proposal_id: String },
    /// Reject a pending proposal.
    Reject {
        proposal_id: String,
        /// Why (kept with the decision).
        #[arg(long)]
        feedback: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum EditorCmd {
    /// Create an editor.
    Create {
        #[arg(long)]
        name: String,
        #[arg(long = "type", value_enum, default_value = "human")]
        editor_type: EditorKind,
        /// Choose the id (default: generated).
        #[arg(long)]
        id: Option<String>,
    },
    /// Delete an editor and its grants.
    Delete { editor: String },
    /// List editors.
    List,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub(crate) enum EditorKind {
    Human,
    Agent,
}

#[derive(Subcommand, Debug)]
pub(crate) enum BlockCmd {
    /// Create a block.
    Create {
        #[arg(long = "type")]
        block_type: String,
        #[arg(long)]
        name: String,
        #[arg(long)]
        description: Option<String>,
    },
    /// List blocks.
    List,
    /// Show one block with its relations (with --at, as it was after event SEQ).
    Show {
        id: String,
        /// Show the block as of this event seq (see `elfiee log`).
        #[arg(long)]
        at: Option<u64>,
    },
    /// Delete a block (and every relation and grant that mentions it).
    Delete { id: String },
    /// Rename a block.
    Rename {
        id: String,
        #[arg(long)]
        name: String,
    },
    /// Link FROM to TO.
    Link(LinkArgs),
    /// Remove a link.
    Unlink(LinkArgs),
}

#[derive(Args, Debug)]
pub(crate) struct LinkArgs {
    pub(crate) from: String,
    pub(crate) to: String,
    /// reference | implement
    #[arg(long, value_parser = ["reference", "implement"])]
    pub(crate) relation: String,
}

#[derive(Args, Debug)]
pub(crate) struct TextSource {
    /// The text itself.
    #[arg(long, conflicts_with = "file")]
    pub(crate) text: Option<String>,
    /// Read the text from a file ('-' for stdin). Without --text or --file, stdin is read.
    #[arg(long)]
    pub(crate) file: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub(crate) enum MarkdownCmd {
    /// Replace a markdown block's text.
    Write {
        id: String,
        #[command(flatten)]
        source: TextSource,
    },
    /// Print a markdown block's text.
    Read { id: String },
}

#[derive(Subcommand, Debug)]
pub(crate) enum CodeCmd {
    /// Replace a code block's text.
    Write {
        id: String,
        #[command(flatten)]
        source: TextSource,
        #[arg(long)]
        language: Option<String>,
    },
    /// Print a code block's text.
    Read { id: String },
}

#[derive(Args, Debug)]
pub(crate) struct GrantArgs {
    /// Editor id, or '*' for every editor.
    pub(crate) editor: String,
    /// Capability id, e.g. markdown.write.
    pub(crate) cap: String,
    /// Block id, or '*' for every block.
    pub(crate) block: String,
}

/// sled panics on some damaged files (e.g. "tried to serialize Uninitialized"); the engine
/// catches those panics and reports the damage as an error that says what to do, so their
/// text is not for the user: the first line on stderr must be that `error: …` (issue 39, F7,
/// F8). Other panics print as before.
fn quiet_sled_panics() {
    let before = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let in_sled = info.location().is_some_and(|l| l.file().contains("/sled-"));
        if in_sled {
            tracing::debug!(panic = %info, "sled panicked (caught)");
        } else {
            before(info);
        }
    }));
}
