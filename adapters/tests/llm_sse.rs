//! The incremental SSE parser: line endings, fields, comments, and chunk boundaries anywhere.

use elfiee_adapters::llm::sse::{SseEvent, SseParser};
use proptest::prelude::*;

fn ev(event: Option<&str>, data: &str) -> SseEvent {
    SseEvent {
        event: event.map(str::to_owned),
        data: data.to_owned(),
    }
}

fn feed(chunks: &[&[u8]]) -> Vec<SseEvent> {
    let mut p = SseParser::new();
    let mut out: Vec<SseEvent> = chunks.iter().flat_map(|c| p.push(c)).collect();
    out.extend(p.finish());
    out
}

const SAMPLE: &str =
    "\u{feff}event: message_start\r\n: comment line\r\ndata: {\"a\": \"你好🙂\"}\r\n\r\n\
event: content_block_delta\ndata: line one\ndata:line two\nid: 7\nretry: 100\n\n\
data: only data\rdata: cr-ended é\r\r\
event: empty\ndata:\n\n\
event: no_data_is_not_dispatched\n\n\
data: last without blank line";

fn sample_events() -> Vec<SseEvent> {
    vec![
        ev(Some("message_start"), "{\"a\": \"你好🙂\"}"),
        ev(Some("content_block_delta"), "line one\nline two"),
        ev(None, "only data\ncr-ended é"),
        ev(Some("empty"), ""),
        ev(None, "last without blank line"),
    ]
}

#[test]
fn whole_sample_parses_to_the_expected_events() {
    assert_eq!(feed(&[SAMPLE.as_bytes()]), sample_events());
}

#[test]
fn every_single_split_point_gives_the_same_events() {
    let bytes = SAMPLE.as_bytes();
    for i in 0..=bytes.len() {
        assert_eq!(
            feed(&[&bytes[..i], &bytes[i..]]),
            sample_events(),
            "split at byte {i}"
        );
    }
}

#[test]
fn one_byte_at_a_time_gives_the_same_events() {
    let chunks: Vec<&[u8]> = SAMPLE.as_bytes().chunks(1).collect();
    assert_eq!(feed(&chunks), sample_events());
}

#[test]
fn crlf_split_between_chunks_is_one_line_break() {
    // "\r" ends one chunk and "\n" starts the next: no phantom blank line (which would dispatch early).
    assert_eq!(
        feed(&[b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]),
        vec![ev(None, "a\nb")]
    );
}

#[test]
fn invalid_utf8_is_replaced_not_fatal() {
    assert_eq!(
        feed(&[b"data: \xff\xfe ok\n\n"]),
        vec![ev(None, "\u{fffd}\u{fffd} ok")]
    );
}

proptest! {
    #[test]
    fn any_chunking_gives_the_same_events(cuts in proptest::collection::vec(0usize..SAMPLE.len(), 0..12)) {
        let bytes = SAMPLE.as_bytes();
        let mut cuts = cuts;
        cuts.sort_unstable();
        let mut chunks = Vec::new();
        let mut prev = 0;
        for c in cuts {
            chunks.push(&bytes[prev..c]);
            prev = c;
        }
        chunks.push(&bytes[prev..]);
        prop_assert_eq!(feed(&chunks), sample_events());
    }
}
