//! The generator's choices: a hand-written splitmix64 ([`Rng`]) and the kinds of file it
//! writes ([`Kind`]), and the words its names and text are made of.

pub(super) const WORDS: &[&str] = &[
    "buffer", "cache", "index", "token", "parser", "stream", "event", "block", "store", "config",
    "handle", "reader", "writer", "codec", "frame", "queue", "worker", "session", "channel",
    "packet", "schema", "record", "cursor", "range", "offset", "segment", "journal", "snapshot",
    "digest", "ledger", "policy", "grant", "editor", "actor", "state", "commit", "batch", "entry",
    "node", "graph", "layout", "render", "widget", "filter", "query", "plan", "route", "client",
    "server", "socket", "message", "header", "payload", "chunk", "bucket", "shard", "replica",
    "lease", "lock", "timer", "clock", "signal", "metric", "trace", "span", "report", "error",
    "value", "key", "map", "tree", "heap", "slot", "pool", "arena", "page", "table", "column",
    "row", "field", "scope", "module", "symbol", "source", "target", "path", "folder", "asset",
    "image", "theme", "color", "font", "style", "format", "locale", "user", "account", "profile",
    "request", "response", "backend", "driver", "device", "kernel", "thread", "task", "job",
    "pipeline", "stage", "hook", "plugin", "adapter", "bridge", "proxy", "gateway", "limit",
    "quota", "budget", "window", "delta", "patch", "diff", "merge", "branch", "tag", "version",
    "manifest", "bundle", "archive", "loader", "builder", "factory", "registry", "catalog",
    "vector", "matrix", "sample", "model", "tensor", "weight", "score", "rank", "search", "match",
];

/// splitmix64.
#[derive(Debug, Clone)]
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(super) fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    pub(super) fn between(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below((hi - lo + 1) as u64) as usize
    }

    /// Uniform in `[0, 1)`.
    pub(super) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// One of `items`, each drawn with probability proportional to its weight (one draw of
    /// `below`); `None` only when the weights sum to zero.
    pub(super) fn weighted<T: Copy>(&mut self, items: &[(T, u64)]) -> Option<T> {
        let mut r = self.below(items.iter().map(|i| i.1).sum());
        items
            .iter()
            .find(|(_, w)| {
                let hit = r < *w;
                r = r.saturating_sub(*w);
                hit
            })
            .map(|i| i.0)
    }

    pub(super) fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    pub(super) fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }

    pub(super) fn word(&mut self) -> &'static str {
        WORDS[self.below(WORDS.len() as u64) as usize]
    }

    /// Approximately standard normal (Irwin–Hall: sum of 12 uniforms − 6; pure arithmetic).
    pub(super) fn normal(&mut self) -> f64 {
        (0..12).map(|_| self.unit()).sum::<f64>() - 6.0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Rust,
    Markdown,
    Toml,
    Json,
    Python,
    TypeScript,
    Yaml,
    Text,
}

impl Kind {
    pub(super) fn ext(self) -> &'static str {
        match self {
            Kind::Rust => "rs",
            Kind::Markdown => "md",
            Kind::Toml => "toml",
            Kind::Json => "json",
            Kind::Python => "py",
            Kind::TypeScript => "ts",
            Kind::Yaml => "yaml",
            Kind::Text => "txt",
        }
    }

    pub(super) fn of(path: &str) -> Kind {
        match path.rsplit_once('.').map(|(_, e)| e).unwrap_or("") {
            "rs" => Kind::Rust,
            "md" => Kind::Markdown,
            "toml" => Kind::Toml,
            "json" => Kind::Json,
            "py" => Kind::Python,
            "ts" => Kind::TypeScript,
            "yaml" | "yml" => Kind::Yaml,
            _ => Kind::Text,
        }
    }

    /// Line comment prefix, if the format has one.
    pub(super) fn comment(self) -> Option<&'static str> {
        match self {
            Kind::Rust | Kind::TypeScript => Some("// "),
            Kind::Python | Kind::Toml | Kind::Yaml => Some("# "),
            Kind::Markdown | Kind::Json | Kind::Text => None,
        }
    }

    /// Relative typical size (config files are small).
    pub(super) fn size_weight(self) -> f64 {
        match self {
            Kind::Toml | Kind::Yaml => 0.4,
            Kind::Json => 0.6,
            Kind::Markdown => 0.8,
            _ => 1.0,
        }
    }
}
