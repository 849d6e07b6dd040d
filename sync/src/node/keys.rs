//! The document keys on one device (decision 0047): reading this device's copies from the
//! stream, making a generation (the first device; the device that removed one), sealing
//! copies to the devices that hold the document, and opening what arrives.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, message::PublishMessage};

use crate::encryption::{DocKey, KeyCopy, Keyring, Sealed};
use crate::envelope::Message;
use crate::identity::{NodeId, NodeKey, Rejection};
use crate::membership;

use super::inner::Inner;
use super::types::KeptFor;

/// Why a message could not be opened.
#[derive(Debug)]
pub(super) enum Unopened {
    /// Sealed with a key this device does not hold (yet: its copy may be on its way; or
    /// never: the device was removed).
    NoKey,
    /// Altered, or not what it says.
    Bad(Rejection),
}

/// Every copy of a document key sealed to `key`'s device on `doc`'s stream, opened (a copy
/// that does not open is skipped). Any key that opens reads; which may be written with is
/// [`Keyring::current`]'s question.
pub async fn device_keyring(
    stream: &jetstream::stream::Stream,
    doc: &str,
    key: &NodeKey,
    timeout: Duration,
) -> Result<Keyring, String> {
    let mut ring = Keyring::default();
    let subject = format!("elf.{doc}.key.{}", key.node().to_hex());
    let c = stream
        .create_consumer(consumer::pull::Config {
            filter_subject: subject.clone(),
            ack_policy: consumer::AckPolicy::None,
            inactive_threshold: Duration::from_secs(10),
            ..Default::default()
        })
        .await
        .map_err(|e| format!("cannot read {subject}: {e}"))?;
    let pending = c.cached_info().num_pending as usize;
    let name = c.cached_info().name.clone();
    if pending > 0 {
        use futures_util::StreamExt;
        let mut messages = c
            .fetch()
            .max_messages(pending)
            .expires(timeout)
            .messages()
            .await
            .map_err(|e| format!("cannot read {subject}: {e}"))?;
        while let Some(m) = messages.next().await {
            let m = m.map_err(|e| format!("cannot read {subject}: {e}"))?;
            match KeyCopy::read(&m.payload).and_then(|c| c.open(doc, key)) {
                Ok(k) => ring.insert(k),
                Err(why) => tracing::warn!(error = %why, "sync: a key copy does not open"),
            }
        }
    }
    let _ = stream.delete_consumer(&name).await;
    Ok(ring)
}

impl Keyring {
    /// `payload` (a message on an event subject) opened: a sealed envelope with the key it
    /// names, an older plain one as it is.
    pub fn open_message(&self, doc: &str, payload: &[u8]) -> Result<Message, Rejection> {
        open(self, doc, payload)
            .map(|(m, _)| m)
            .map_err(|e| match e {
                Unopened::NoKey => Rejection::Undecryptable,
                Unopened::Bad(r) => r,
            })
    }
}

/// A message and the key that opened it (`None`: an older, plain message).
pub(super) fn open(
    ring: &Keyring,
    doc: &str,
    payload: &[u8],
) -> Result<(Message, Option<DocKey>), Unopened> {
    let Some(sealed) = Sealed::read(payload) else {
        if let Some(v) = Sealed::newer_format(payload) {
            return Err(Unopened::Bad(Rejection::Malformed(format!(
                "sealed with format {v}, newer than this program reads ({} and {}): update elfiee on this device",
                crate::encryption::SEALED_V3,
                crate::encryption::SEALED_VERSION
            ))));
        }
        return Message::decode(payload)
            .map(|m| (m, None))
            .map_err(Unopened::Bad);
    };
    let key = ring.get(sealed.kid).cloned().ok_or(Unopened::NoKey)?;
    let plain = sealed.open(&key, doc).map_err(Unopened::Bad)?;
    let message = Message::decode(&plain).map_err(Unopened::Bad)?;
    // The node outside (which the broker routes by) is the one that signed inside.
    if message
        .events()
        .iter()
        .any(|e| e.origin.node != sealed.node)
    {
        return Err(Unopened::Bad(Rejection::BadSignature(sealed.node.to_hex())));
    }
    Ok((message, Some(key)))
}

impl Inner {
    /// [`open`] with this device's keys.
    pub(super) fn open(&self, payload: &[u8]) -> Result<(Message, Option<DocKey>), Unopened> {
        let ring = self.keyring.lock().unwrap_or_else(|p| p.into_inner());
        open(&ring, &self.config.doc, payload)
    }

    /// The generation `payload` is sealed with when this device lacks its key (`None`: it
    /// holds it, or the message is not sealed). Reads the header alone.
    pub(super) fn lacks_key(&self, payload: &[u8]) -> Option<u32> {
        let header = Sealed::read_header(payload)?;
        let ring = self.keyring.lock().unwrap_or_else(|p| p.into_inner());
        ring.get(header.kid).is_none().then_some(header.gen)
    }

    /// The devices that hold the document now (the merged state's members and the first
    /// device, less the removed).
    fn current(&self) -> Vec<NodeId> {
        membership::current(self.lock().replica.state(), self.genesis().as_ref())
    }

    /// The key to write with: the newest generation sealed by a device that holds the
    /// document, and no older than the removals this device knows of; `None` while it has
    /// none (the publisher waits) or when it writes issue 28's plain format.
    ///
    /// Looked up again only when what it depends on may have changed: a `node.add` or
    /// `node.remove` folded, the genesis learnt, a key received (it is asked for at every
    /// envelope and status refresh).
    pub(super) fn writing_key(&self) -> Option<DocKey> {
        if self.config.legacy_format {
            return None;
        }
        let held = self.keyring.lock().map_or(0, |r| r.len());
        let stamp = (self.lock().members_epoch, self.genesis().is_some(), held);
        let mut cache = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, key)) = cache.as_ref() {
            if *at == stamp {
                return key.clone();
            }
        }
        let current = self.current();
        let required = self.lock().replica.removals().len() as u32;
        let key = {
            let ring = self.keyring.lock().unwrap_or_else(|p| p.into_inner());
            ring.current(|n| current.contains(n))
                .filter(|k| k.gen >= required)
                .cloned()
        };
        *cache = Some((stamp, key.clone()));
        key
    }

    /// Reads this device's copies of the document keys from the stream.
    pub(super) async fn refresh_keys(
        &self,
        stream: &jetstream::stream::Stream,
    ) -> Result<(), String> {
        let ring = device_keyring(stream, &self.config.doc, &self.key, self.config.timeout).await?;
        let mut mine = self.keyring.lock().unwrap_or_else(|p| p.into_inner());
        for k in ring.keys() {
            mine.insert(k.clone());
        }
        Ok(())
    }

    /// Keeps the document keys when who holds the document changed (or `force`): reads this
    /// device's copies, makes the generation this device owes (the first, on the document's
    /// first device; a new one after a removal it committed), and seals the keys to every
    /// device that holds the document and lacks them.
    pub(super) async fn keep_keys(
        &self,
        js: &jetstream::Context,
        stream: &jetstream::stream::Stream,
        force: bool,
    ) -> Result<(), String> {
        if self.config.legacy_format {
            return Ok(());
        }
        let current = self.current();
        let removals = self.lock().replica.removals();
        let held = self.keyring.lock().map(|r| r.keys().len()).unwrap_or(0);
        let view = KeptFor {
            current: current.clone(),
            removals: removals.len(),
            keys: held,
        };
        if !force && *self.keys_kept_for.lock().unwrap_or_else(|p| p.into_inner()) == view {
            return Ok(());
        }
        self.refresh_keys(stream).await?;
        if !current.contains(&self.node) {
            // A device that does not hold the document (not added yet, or removed) makes and
            // seals nothing.
            *self.keys_kept_for.lock().unwrap_or_else(|p| p.into_inner()) = view;
            return Ok(());
        }
        let required = removals.len() as u32;
        let newest = {
            let ring = self.keyring.lock().unwrap_or_else(|p| p.into_inner());
            ring.current(|n| current.contains(n)).map(|k| k.gen)
        };
        let owes = match newest {
            None => self.genesis() == Some(self.node) || removals.iter().any(|r| r.by == self.node),
            Some(gen) => gen < required && removals.iter().any(|r| r.by == self.node),
        };
        if owes {
            let key = DocKey::generate(required, self.node);
            // Its own copy first: the key survives a restart on the stream alone.
            self.send_copy(js, &key, &self.node).await?;
            self.keyring
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key);
        }
        self.share_keys(js, stream, &current).await?;
        let held = self.keyring.lock().map(|r| r.keys().len()).unwrap_or(0);
        *self.keys_kept_for.lock().unwrap_or_else(|p| p.into_inner()) =
            KeptFor { keys: held, ..view };
        Ok(())
    }

    /// Seals to each device in `current` the keys it lacks (past the generation of the last
    /// copy on its subject): every key sealed by a device that holds the document, and the
    /// older generations of any device that ever did (a device that joins reads the whole
    /// history). Never a key sealed by a stranger.
    async fn share_keys(
        &self,
        js: &jetstream::Context,
        stream: &jetstream::stream::Stream,
        current: &[NodeId],
    ) -> Result<(), String> {
        let (keys, newest) = {
            let ever: Vec<NodeId> = membership::members(self.lock().replica.state())
                .into_keys()
                .chain(self.genesis())
                .collect();
            let ring = self.keyring.lock().unwrap_or_else(|p| p.into_inner());
            let newest = ring.current(|n| current.contains(n)).map_or(0, |k| k.gen);
            let keys: Vec<DocKey> = ring
                .keys()
                .into_iter()
                .filter(|k| {
                    current.contains(&k.sealer) || (ever.contains(&k.sealer) && k.gen < newest)
                })
                .cloned()
                .collect();
            (keys, newest)
        };
        if keys.is_empty() {
            return Ok(());
        }
        for to in current.iter().filter(|n| **n != self.node) {
            let subject = self.config.key_subject(to);
            let has = match stream.get_last_raw_message_by_subject(&subject).await {
                Ok(m) => KeyCopy::read(&m.payload).ok().map(|c| c.gen),
                Err(e)
                    if e.kind() == jetstream::stream::LastRawMessageErrorKind::NoMessageFound =>
                {
                    None
                }
                Err(e) => return Err(format!("cannot read {subject}: {e}")),
            };
            if has.is_some_and(|g| g >= newest) {
                continue;
            }
            for k in keys.iter().filter(|k| has.is_none_or(|g| k.gen > g)) {
                self.send_copy(js, k, to).await?;
            }
        }
        Ok(())
    }

    /// Publishes `key` sealed to `to`, and waits for the broker's acknowledgement.
    async fn send_copy(
        &self,
        js: &jetstream::Context,
        key: &DocKey,
        to: &NodeId,
    ) -> Result<(), String> {
        let Some(copy) = KeyCopy::seal(key, &self.config.doc, to, &self.key) else {
            return Ok(());
        };
        let msg = PublishMessage::build()
            .payload(copy.into())
            .message_id(format!("key:{:016x}:{}", key.id, to.to_hex()));
        js.send_publish(self.config.key_subject(to), msg)
            .await
            .map_err(|e| format!("cannot publish a key copy: {e}"))?
            .await
            .map_err(|e| format!("no PubAck for a key copy: {e}"))?;
        tracing::debug!(gen = key.gen, to = %to, "sync: sealed a document key");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_sealed_in_a_later_format_is_refused_by_name() {
        // A later build's sealed envelope: the same wrapper with a higher `v`.
        let later = rmp_serde::to_vec_named(&serde_json::json!({
            "v": crate::encryption::SEALED_VERSION + 1,
            "node": NodeId([1; 32]),
            "gen": 0,
            "kid": 7,
            "body": vec![0u8; 40],
        }))
        .unwrap();
        match open(&Keyring::default(), "doc", &later) {
            Err(Unopened::Bad(Rejection::Malformed(why))) => {
                assert!(why.contains("update elfiee on this device"), "{why}")
            }
            other => panic!("{other:?}"),
        }
    }
}
