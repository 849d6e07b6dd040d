//! The text of generated files: words, sentences, and units of Rust, Python, TypeScript and
//! Markdown sized to a target, each file's kind its own shape.

use std::fmt::Write as _;

use super::pick::{Kind, Rng, WORDS};

pub(super) const FILLER: &[&str] = &[
    "the", "a", "of", "to", "and", "is", "when", "for", "with", "each", "every", "not", "before",
    "after", "once", "only", "this", "that", "from", "into",
];

pub(super) const VERBS: &[&str] = &[
    "load", "store", "parse", "flush", "apply", "check", "build", "open", "close", "read", "write",
    "merge", "split", "encode", "decode", "resolve", "render", "spawn", "drain", "insert",
    "remove", "update", "fetch", "commit", "replay", "verify", "collect", "emit", "scan", "sync",
];

pub(super) const RUST_TYPES: &[&str] = &[
    "u8",
    "u32",
    "u64",
    "usize",
    "i64",
    "bool",
    "String",
    "&str",
    "Vec<u8>",
    "Option<String>",
    "Duration",
    "PathBuf",
    "Arc<State>",
    "HashMap<String, u64>",
    "Vec<Entry>",
];

pub(super) fn camel(w: &str) -> String {
    let mut c = w.chars();
    match c.next() {
        Some(f) => f.to_ascii_uppercase().to_string() + c.as_str(),
        None => String::new(),
    }
}

pub(super) fn type_name(rng: &mut Rng) -> String {
    format!("{}{}", camel(rng.word()), camel(rng.word()))
}

pub(super) fn ident(rng: &mut Rng) -> String {
    if rng.chance(0.5) {
        rng.pick(WORDS).to_string()
    } else {
        format!("{}_{}", rng.pick(WORDS), rng.pick(WORDS))
    }
}

pub(super) fn fn_name(rng: &mut Rng) -> String {
    format!("{}_{}", rng.pick(VERBS), rng.pick(WORDS))
}

pub(super) fn sentence(rng: &mut Rng, min: usize, max: usize) -> String {
    let n = rng.between(min, max);
    let mut s = String::new();
    for i in 0..n {
        let w = if rng.chance(0.35) {
            *rng.pick(FILLER)
        } else if rng.chance(0.3) {
            *rng.pick(VERBS)
        } else {
            *rng.pick(WORDS)
        };
        if i == 0 {
            s.push_str(&camel(w));
        } else {
            s.push(' ');
            s.push_str(w);
        }
    }
    s.push('.');
    s
}

/// Prose paragraph wrapped at about `width` columns, each line prefixed.
pub(super) fn paragraph(
    rng: &mut Rng,
    out: &mut String,
    prefix: &str,
    sentences: usize,
    width: usize,
) {
    let mut line = String::from(prefix);
    for _ in 0..sentences {
        for word in sentence(rng, 5, 14).split(' ') {
            if line.len() + word.len() + 1 > width && line.len() > prefix.len() {
                out.push_str(line.trim_end());
                out.push('\n');
                line.clear();
                line.push_str(prefix);
            }
            line.push_str(word);
            line.push(' ');
        }
    }
    if line.len() > prefix.len() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

/// Text of `kind` of exactly `target` bytes (ASCII, ends with a newline when non-empty).
pub(super) fn render(kind: Kind, rng: &mut Rng, target: usize) -> String {
    let mut out = String::with_capacity(target + 64);
    header(kind, rng, &mut out);
    let tail = match kind {
        Kind::Json => "  \"version\": 1\n}\n",
        _ => "",
    };
    let mut chunk = String::new();
    let mut n = 0;
    let mut misses = 0;
    while misses < 4 {
        chunk.clear();
        unit(kind, rng, &mut chunk, n, misses > 0);
        n += 1;
        if out.len() + chunk.len() + tail.len() <= target {
            out.push_str(&chunk);
        } else {
            misses += 1;
        }
    }
    let gap = target.saturating_sub(out.len() + tail.len());
    filler(kind, rng, gap, &mut out);
    out.push_str(tail);
    if out.len() > target {
        out.truncate(target);
        if let Some(last) = out.pop() {
            let _ = last;
            out.push('\n');
        }
    }
    out
}

pub(super) fn header(kind: Kind, rng: &mut Rng, out: &mut String) {
    match kind {
        Kind::Rust => {
            paragraph(rng, out, "//! ", 2, 96);
            out.push('\n');
            for _ in 0..rng.between(1, 5) {
                let _ = writeln!(
                    out,
                    "use {}::{}::{{{}, {}}};",
                    rng.pick(&["crate", "super", "std", "elfiee_model", "serde"]),
                    rng.pick(WORDS),
                    type_name(rng),
                    fn_name(rng)
                );
            }
            out.push('\n');
        }
        Kind::Python => {
            out.push_str("\"\"\"");
            paragraph(rng, out, "", 1, 88);
            out.push_str("\"\"\"\n\n");
            for _ in 0..rng.between(1, 4) {
                let _ = writeln!(
                    out,
                    "from {}.{} import {}",
                    rng.pick(WORDS),
                    rng.pick(WORDS),
                    fn_name(rng)
                );
            }
            out.push_str("import os\nimport sys\n\n");
        }
        Kind::TypeScript => {
            for _ in 0..rng.between(1, 4) {
                let _ = writeln!(
                    out,
                    "import {{ {}, {} }} from \"../{}/{}\";",
                    type_name(rng),
                    rng.pick(VERBS),
                    rng.pick(WORDS),
                    rng.pick(WORDS)
                );
            }
            out.push('\n');
        }
        Kind::Markdown => {
            let _ = writeln!(out, "# {} {}\n", camel(rng.word()), rng.pick(WORDS));
        }
        Kind::Toml => {
            let _ = writeln!(
                out,
                "[package]\nname = \"{}-{}\"\nversion = \"0.{}.{}\"\n",
                rng.pick(WORDS),
                rng.pick(WORDS),
                rng.below(20),
                rng.below(10)
            );
        }
        Kind::Json => out.push_str("{\n"),
        Kind::Yaml => {
            let _ = writeln!(
                out,
                "# {}\nversion: {}",
                sentence(rng, 4, 9),
                rng.between(1, 3)
            );
        }
        Kind::Text => {
            let _ = writeln!(out, "{}\n", sentence(rng, 3, 7).to_uppercase());
        }
    }
}

/// One self-contained piece of a file of `kind` (a function, a section, an entry…); `small`
/// asks for a short one.
pub(super) fn unit(kind: Kind, rng: &mut Rng, out: &mut String, n: usize, small: bool) {
    match kind {
        Kind::Rust => rust_unit(rng, out, n, small),
        Kind::Python => python_unit(rng, out, small),
        Kind::TypeScript => ts_unit(rng, out, small),
        Kind::Markdown => md_unit(rng, out, small),
        Kind::Toml => {
            let _ = writeln!(
                out,
                "[{}{}]",
                if rng.chance(0.2) { "[" } else { "" },
                ident(rng)
            );
            for _ in 0..rng.between(1, if small { 2 } else { 6 }) {
                match rng.below(4) {
                    0 => writeln!(out, "{} = {}", ident(rng), rng.below(10_000)),
                    1 => writeln!(out, "{} = {}", ident(rng), rng.chance(0.5)),
                    2 => writeln!(
                        out,
                        "{} = [\"{}\", \"{}\"]",
                        ident(rng),
                        rng.pick(WORDS),
                        rng.pick(WORDS)
                    ),
                    _ => writeln!(out, "{} = \"{}\"", ident(rng), sentence(rng, 2, 6)),
                }
                .unwrap_or(());
            }
            out.push('\n');
        }
        Kind::Json => {
            let _ = write!(
                out,
                "  \"{}_{n}\": {{\"name\": \"{}\", \"enabled\": {}, \"count\": {}",
                ident(rng),
                ident(rng),
                rng.chance(0.5),
                rng.below(100_000)
            );
            if !small {
                let _ = write!(
                    out,
                    ", \"tags\": [\"{}\", \"{}\", \"{}\"], \"description\": \"{}\"",
                    rng.pick(WORDS),
                    rng.pick(WORDS),
                    rng.pick(VERBS),
                    sentence(rng, 4, 12)
                );
            }
            out.push_str("},\n");
        }
        Kind::Yaml => {
            let _ = writeln!(out, "{}_{n}:", ident(rng));
            for _ in 0..rng.between(1, if small { 2 } else { 5 }) {
                if rng.chance(0.3) {
                    let _ = writeln!(out, "  {}:", ident(rng));
                    for _ in 0..rng.between(1, 4) {
                        let _ = writeln!(out, "    - {}", ident(rng));
                    }
                } else {
                    let _ = writeln!(out, "  {}: {}", ident(rng), rng.below(1000));
                }
            }
        }
        Kind::Text => {
            if rng.chance(0.3) {
                for i in 0..rng.between(2, 6) {
                    let _ = writeln!(out, "{}. {}", i + 1, sentence(rng, 4, 10));
                }
                out.push('\n');
            } else {
                let n = if small { 1 } else { rng.between(2, 6) };
                paragraph(rng, out, "", n, 76);
                out.push('\n');
            }
        }
    }
}

pub(super) fn rust_stmt(rng: &mut Rng, out: &mut String, ind: &str) {
    let (a, b) = (ident(rng), ident(rng));
    let _ = match rng.below(9) {
        0 => writeln!(out, "{ind}let {a} = {b}.{}()?;", fn_name(rng)),
        1 => writeln!(
            out,
            "{ind}let mut {a} = Vec::with_capacity({});",
            rng.below(512)
        ),
        2 => writeln!(
            out,
            "{ind}if {a}.is_empty() {{\n{ind}    return Err(Error::{}(\"{}\".into()));\n{ind}}}",
            camel(rng.word()),
            sentence(rng, 3, 7)
        ),
        3 => writeln!(
            out,
            "{ind}for {a} in {b}.iter() {{\n{ind}    self.{}.push({a}.{}());\n{ind}}}",
            rng.pick(WORDS),
            fn_name(rng)
        ),
        4 => writeln!(out, "{ind}// {}", sentence(rng, 4, 14)),
        5 => writeln!(
            out,
            "{ind}let {a} = match {b} {{\n{ind}    Some(v) => v.{}(),\n{ind}    None => {},\n{ind}}};",
            fn_name(rng),
            rng.below(100)
        ),
        6 => writeln!(out, "{ind}self.{a}.{}(&{b});", fn_name(rng)),
        7 => writeln!(
            out,
            "{ind}tracing::debug!(\"{}: {{}}\", {a});",
            sentence(rng, 2, 6)
        ),
        _ => writeln!(
            out,
            "{ind}let {a}: {} = {b}.len() as _;",
            rng.pick(RUST_TYPES)
        ),
    };
}

pub(super) fn rust_unit(rng: &mut Rng, out: &mut String, n: usize, small: bool) {
    if small {
        let _ = writeln!(
            out,
            "pub const {}_{n}: usize = {};\n",
            ident(rng).to_uppercase(),
            rng.below(65_536)
        );
        return;
    }
    match rng.below(6) {
        0 => {
            paragraph(rng, out, "/// ", 1, 96);
            let _ = writeln!(
                out,
                "#[derive(Debug, Clone{})]\npub struct {} {{",
                if rng.chance(0.4) { ", PartialEq" } else { "" },
                type_name(rng)
            );
            for _ in 0..rng.between(2, 7) {
                if rng.chance(0.3) {
                    let _ = writeln!(out, "    /// {}", sentence(rng, 3, 10));
                }
                let _ = writeln!(out, "    pub {}: {},", ident(rng), rng.pick(RUST_TYPES));
            }
            out.push_str("}\n\n");
        }
        1 => {
            let _ = writeln!(out, "impl {} {{", type_name(rng));
            for m in 0..rng.between(1, 4) {
                if m > 0 {
                    out.push('\n');
                }
                paragraph(rng, out, "    /// ", 1, 96);
                let _ = writeln!(
                    out,
                    "    pub fn {}(&{}self, {}: {}) -> Result<{}, Error> {{",
                    fn_name(rng),
                    if rng.chance(0.3) { "mut " } else { "" },
                    ident(rng),
                    rng.pick(RUST_TYPES),
                    rng.pick(RUST_TYPES)
                );
                for _ in 0..rng.between(2, 8) {
                    rust_stmt(rng, out, "        ");
                }
                let _ = writeln!(out, "        Ok({})\n    }}", ident(rng));
            }
            out.push_str("}\n\n");
        }
        2 => {
            let _ = writeln!(out, "#[derive(Debug, Clone, Copy, PartialEq, Eq)]");
            let _ = writeln!(out, "pub enum {} {{", type_name(rng));
            for _ in 0..rng.between(2, 7) {
                let _ = writeln!(out, "    {},", camel(rng.word()));
            }
            out.push_str("}\n\n");
        }
        3 => {
            let _ = writeln!(
                out,
                "#[cfg(test)]\nmod tests_{n} {{\n    use super::*;\n\n    #[test]\n    fn {}() {{",
                fn_name(rng)
            );
            for _ in 0..rng.between(2, 6) {
                rust_stmt(rng, out, "        ");
            }
            let _ = writeln!(
                out,
                "        assert_eq!({}.len(), {});\n    }}\n}}\n",
                ident(rng),
                rng.below(64)
            );
        }
        _ => {
            let n = rng.between(1, 2);
            paragraph(rng, out, "/// ", n, 96);
            let _ = writeln!(
                out,
                "pub{} fn {}({}: &{}) -> Option<{}> {{",
                if rng.chance(0.3) { " async" } else { "" },
                fn_name(rng),
                ident(rng),
                type_name(rng),
                rng.pick(RUST_TYPES)
            );
            for _ in 0..rng.between(3, 10) {
                rust_stmt(rng, out, "    ");
            }
            let _ = writeln!(out, "    Some({})\n}}\n", ident(rng));
        }
    }
}

pub(super) fn python_unit(rng: &mut Rng, out: &mut String, small: bool) {
    let stmt = |rng: &mut Rng, out: &mut String, ind: &str| {
        let (a, b) = (ident(rng), ident(rng));
        let _ = match rng.below(6) {
            0 => writeln!(out, "{ind}{a} = {b}.{}()", fn_name(rng)),
            1 => writeln!(
                out,
                "{ind}if not {a}:\n{ind}    raise ValueError(\"{}\")",
                sentence(rng, 3, 7)
            ),
            2 => writeln!(
                out,
                "{ind}for {a} in {b}:\n{ind}    self.{}.append({a})",
                rng.pick(WORDS)
            ),
            3 => writeln!(out, "{ind}# {}", sentence(rng, 4, 12)),
            4 => writeln!(
                out,
                "{ind}{a} = {{\"{}\": {b}, \"{}\": {}}}",
                rng.pick(WORDS),
                rng.pick(WORDS),
                rng.below(100)
            ),
            _ => writeln!(out, "{ind}log.debug(\"%s {}\", {a})", rng.pick(VERBS)),
        };
    };
    if small {
        let _ = writeln!(
            out,
            "{} = {}\n",
            ident(rng).to_uppercase(),
            rng.below(10_000)
        );
    } else if rng.chance(0.4) {
        let _ = writeln!(out, "class {}:", type_name(rng));
        paragraph(rng, out, "    # ", 1, 88);
        for _ in 0..rng.between(1, 3) {
            let _ = writeln!(
                out,
                "\n    def {}(self, {}, {}=None):",
                fn_name(rng),
                ident(rng),
                ident(rng)
            );
            for _ in 0..rng.between(2, 6) {
                stmt(rng, out, "        ");
            }
            let _ = writeln!(out, "        return {}", ident(rng));
        }
        out.push_str("\n\n");
    } else {
        let _ = writeln!(out, "def {}({}, {}):", fn_name(rng), ident(rng), ident(rng));
        let _ = writeln!(out, "    \"\"\"{}\"\"\"", sentence(rng, 4, 12));
        for _ in 0..rng.between(2, 8) {
            stmt(rng, out, "    ");
        }
        let _ = writeln!(out, "    return {}\n\n", ident(rng));
    }
}

pub(super) fn ts_unit(rng: &mut Rng, out: &mut String, small: bool) {
    let var = |rng: &mut Rng| format!("{}{}", rng.pick(WORDS), camel(rng.word()));
    if small {
        let _ = writeln!(
            out,
            "export const {} = {};\n",
            var(rng).to_uppercase(),
            rng.below(10_000)
        );
        return;
    }
    match rng.below(3) {
        0 => {
            let _ = writeln!(out, "export interface {} {{", type_name(rng));
            for _ in 0..rng.between(2, 7) {
                let _ = writeln!(
                    out,
                    "  {}{}: {};",
                    var(rng),
                    if rng.chance(0.3) { "?" } else { "" },
                    rng.pick(&["string", "number", "boolean", "string[]", "Date", "unknown"])
                );
            }
            out.push_str("}\n\n");
        }
        1 => {
            let _ = writeln!(out, "/** {} */", sentence(rng, 4, 12));
            let _ = writeln!(
                out,
                "export async function {}{}({}: {}): Promise<{}> {{",
                rng.pick(VERBS),
                camel(rng.word()),
                var(rng),
                type_name(rng),
                type_name(rng)
            );
            for _ in 0..rng.between(2, 8) {
                let (a, b) = (var(rng), var(rng));
                let _ = match rng.below(4) {
                    0 => writeln!(out, "  const {a} = await {b}.{}();", rng.pick(VERBS)),
                    1 => writeln!(
                        out,
                        "  if (!{a}) {{\n    throw new Error(\"{}\");\n  }}",
                        sentence(rng, 3, 7)
                    ),
                    2 => writeln!(out, "  // {}", sentence(rng, 4, 12)),
                    _ => writeln!(
                        out,
                        "  for (const {a} of {b}) {{\n    this.{}.push({a});\n  }}",
                        rng.pick(WORDS)
                    ),
                };
            }
            let _ = writeln!(out, "  return {};\n}}\n", var(rng));
        }
        _ => {
            let _ = writeln!(out, "export class {} {{", type_name(rng));
            for _ in 0..rng.between(1, 4) {
                let _ = writeln!(
                    out,
                    "  private {}: {} = {};",
                    var(rng),
                    rng.pick(&["number", "string"]),
                    rng.below(100)
                );
            }
            for _ in 0..rng.between(1, 3) {
                let _ = writeln!(out, "\n  {}(): void {{", var(rng));
                let _ = writeln!(
                    out,
                    "    this.{} = {}.{}(this.{});\n  }}",
                    var(rng),
                    var(rng),
                    rng.pick(VERBS),
                    var(rng)
                );
            }
            out.push_str("}\n\n");
        }
    }
}

pub(super) fn md_unit(rng: &mut Rng, out: &mut String, small: bool) {
    if small {
        paragraph(rng, out, "", 1, 80);
        out.push('\n');
        return;
    }
    match rng.below(6) {
        0 => {
            let _ = writeln!(out, "## {}\n", sentence(rng, 2, 5).trim_end_matches('.'));
        }
        1 => {
            for _ in 0..rng.between(2, 6) {
                let _ = writeln!(out, "- {}", sentence(rng, 4, 12));
            }
            out.push('\n');
        }
        2 => {
            let _ = writeln!(out, "```rust");
            for _ in 0..rng.between(2, 6) {
                rust_stmt(rng, out, "");
            }
            out.push_str("```\n\n");
        }
        3 => {
            let _ = writeln!(
                out,
                "| {} | {} |\n| --- | --- |",
                camel(rng.word()),
                camel(rng.word())
            );
            for _ in 0..rng.between(2, 5) {
                let _ = writeln!(out, "| `{}` | {} |", ident(rng), sentence(rng, 3, 8));
            }
            out.push('\n');
        }
        _ => {
            let n = rng.between(2, 5);
            paragraph(rng, out, "", n, 80);
            out.push('\n');
        }
    }
}

/// Exactly `gap` more bytes that fit the format: comment lines, prose, a JSON string entry.
pub(super) fn filler(kind: Kind, rng: &mut Rng, mut gap: usize, out: &mut String) {
    let (prefix, suffix) = match kind {
        Kind::Json => ("  \"notes\": \"", "\","),
        _ => (kind.comment().unwrap_or(""), ""),
    };
    let mut k = 0;
    while gap > 0 {
        let overhead = prefix.len() + suffix.len() + 1;
        if gap < overhead + 8 {
            out.extend(std::iter::repeat_n('\n', gap));
            return;
        }
        let mut len = gap.min(rng.between(48, 96));
        if gap - len < overhead + 8 {
            len = gap; // no tiny leftover
        }
        let body = len - overhead;
        let mut text = String::with_capacity(body + 16);
        while text.len() < body {
            if !text.is_empty() {
                text.push(' ');
            }
            text.push_str(sentence(rng, 3, 9).as_str());
        }
        text.truncate(body);
        if kind == Kind::Json && k > 0 {
            // distinct keys
            let key = format!("  \"notes{k}\": \"");
            let body = len - key.len() - suffix.len() - 1;
            text.truncate(body.min(text.len()));
            out.push_str(&key);
        } else {
            out.push_str(prefix);
        }
        out.push_str(&text);
        out.push_str(suffix);
        out.push('\n');
        gap -= len;
        k += 1;
    }
}
