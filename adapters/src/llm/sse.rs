//! An incremental Server-Sent Events parser (the WHATWG `text/event-stream` format).
//!
//! Bytes go in as they arrive, in chunks of any size; complete events come out. Lines end with
//! `\n`, `\r\n` or `\r` — also when the `\r` and the `\n` arrive in different chunks. A line is
//! decoded only once it is complete, so a chunk boundary inside a multi-byte UTF-8 character is
//! harmless. `data:` lines of one event are joined with `\n`; `:` lines are comments; `id:` and
//! `retry:` are ignored (we never reconnect a stream).
//!
//! ```
//! use elfiee_adapters::llm::sse::SseParser;
//! let mut p = SseParser::new();
//! let mut events = p.push(b"event: ping\nda");
//! events.extend(p.push(b"ta: {}\n\n"));
//! assert_eq!(events.len(), 1);
//! assert_eq!(events[0].event.as_deref(), Some("ping"));
//! assert_eq!(events[0].data, "{}");
//! ```

use super::LlmError;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` name, if the event had one (`None` means the default, `message`).
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Longest line we buffer. A stream that exceeds it is not an event stream we can use.
pub const MAX_LINE_BYTES: usize = 64 << 20;

#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    /// The last byte seen was `\r`: a `\n` right after it belongs to the same line break.
    after_cr: bool,
    /// The first line was processed (a byte-order mark before it is dropped).
    started: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
    overflow: bool,
}

impl SseParser {
    pub fn new() -> Self {
        SseParser::default()
    }

    /// Feeds a chunk; returns the events it completed, in order.
    pub fn push(&mut self, mut chunk: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        while !chunk.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if chunk[0] == b'\n' {
                    chunk = &chunk[1..];
                    continue;
                }
            }
            match chunk.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(i) => {
                    self.extend_line(&chunk[..i]);
                    self.after_cr = chunk[i] == b'\r';
                    chunk = &chunk[i + 1..];
                    let line = std::mem::take(&mut self.line);
                    self.process_line(&line, &mut out);
                    self.line = line;
                    self.line.clear();
                }
                None => {
                    self.extend_line(chunk);
                    chunk = &[];
                }
            }
        }
        out
    }

    /// The stream ended: returns the last event if it was not followed by a blank line
    /// (lenient — some servers omit the final blank line).
    pub fn finish(&mut self) -> Option<SseEvent> {
        let mut out = Vec::new();
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.process_line(&line, &mut out);
        }
        self.process_line(b"", &mut out);
        out.pop()
    }

    /// Whether a line grew beyond [`MAX_LINE_BYTES`] (its excess was discarded).
    pub fn check(&self) -> Result<(), LlmError> {
        if self.overflow {
            Err(LlmError::Malformed(format!(
                "an SSE line is longer than {MAX_LINE_BYTES} bytes"
            )))
        } else {
            Ok(())
        }
    }

    fn extend_line(&mut self, bytes: &[u8]) {
        let room = MAX_LINE_BYTES.saturating_sub(self.line.len());
        if bytes.len() > room {
            self.overflow = true;
        }
        self.line.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    fn process_line(&mut self, mut line: &[u8], out: &mut Vec<SseEvent>) {
        if !self.started {
            // A byte-order mark before the first line is dropped (whole lines only reach here,
            // so a mark split across chunks is handled too).
            self.started = true;
            line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        }
        if line.is_empty() {
            if self.has_data {
                let mut data = std::mem::take(&mut self.data);
                if data.ends_with('\n') {
                    data.pop();
                }
                out.push(SseEvent {
                    event: self.event.take(),
                    data,
                });
            }
            self.event = None;
            self.has_data = false;
            return;
        }
        if line[0] == b':' {
            return;
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.find(':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (&line[..], ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
                self.has_data = true;
            }
            _ => {} // id, retry, unknown fields
        }
    }
}
