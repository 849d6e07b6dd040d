//! The embedder's host on the engine core alone: what a page sees through it.

use std::path::Path;
use std::sync::{Arc, Mutex};

use elfiee::Event;
use elfiee_embedder::{Forwarded, Host, HostError};
use serde_json::json;

/// `editor` writes `text` into the markdown block `id` through the host.
async fn write(
    host: &Host,
    path: &Path,
    editor: &str,
    id: &str,
    text: &str,
) -> Result<Vec<Event>, HostError> {
    host.submit(
        path,
        editor,
        "markdown.write",
        Some(id),
        json!({"markdown": text}),
    )
    .await
}

#[tokio::test]
async fn a_page_creates_writes_lists_and_receives_every_committed_event_then_reopens_the_document()
{
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.elf");
    let host = Host::default();
    let seen: Arc<Mutex<Vec<Forwarded>>> = Arc::default();
    let sink = seen.clone();
    host.open(&path, Some("alice"), move |f| sink.lock().unwrap().push(f))
        .await
        .unwrap();
    let created = host
        .submit(
            &path,
            "alice",
            "core.create",
            None,
            json!({"name": "Notes", "block_type": "markdown"}),
        )
        .await
        .unwrap();
    let id = created[0].entity.clone();
    let written = write(&host, &path, "alice", &id, "# Hi").await.unwrap();
    let blocks = host.list_blocks(&path, "alice").unwrap();
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0].contents["markdown"], "# Hi");
    // Someone without a grant is refused, with a message, not a panic.
    let refused = write(&host, &path, "mallory", &id, "x").await.unwrap_err();
    assert!(
        matches!(refused, HostError::Engine(ref m) if !m.is_empty()),
        "{refused:?}"
    );
    host.close_all().await;
    // Every committed event reached the page, in order.
    let last = written.last().unwrap().seq;
    for _ in 0..200 {
        if seen
            .lock()
            .unwrap()
            .last()
            .is_some_and(|f| f.event.seq == last)
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let seqs: Vec<u64> = seen.lock().unwrap().iter().map(|f| f.event.seq).collect();
    assert_eq!(seqs.last(), Some(&last), "{seqs:?}");
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    assert!(seen
        .lock()
        .unwrap()
        .iter()
        .any(|f| f.event.attribute.contains("markdown.write")));

    // A path the page never opened gets a message saying what to do.
    let err = host.list_blocks(&path, "alice").unwrap_err();
    assert_eq!(err, HostError::NotOpen(path.display().to_string()));
    assert!(err.to_string().contains("open it first"));
    // Reopened, the document has what was written.
    let host = Host::default();
    host.open(&path, None, |_| {}).await.unwrap();
    let blocks = host.list_blocks(&path, "alice").unwrap();
    assert_eq!(blocks[0].contents["markdown"], "# Hi");
    host.close_all().await;
}
