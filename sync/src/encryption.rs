//! What the broker holds is ciphertext (issue 40, decision 0047; docs/EVENTS.md, "Sync",
//! "Encryption").
//!
//! - A **document key** ([`DocKey`]): 32 random bytes, a generation number (0 when the
//!   document's first device makes it, one more after each device removal) and an id (8
//!   bytes of blake3 of the key, which names it in messages). Envelopes and body chunks are
//!   encrypted with it: XChaCha20-Poly1305, a random 24-byte nonce per message.
//! - A **sealed envelope** (format 4, [`Sealed`]): `{v: 4, node, gen, kid, body}` where
//!   `body` = nonce ‖ AEAD(LZ4 block of the format 2 envelope, its length in front, 4 bytes
//!   little-endian), its associated data `"elfiee sealed 4" ‖ doc ‖ node ‖ gen ‖ kid`. The
//!   node stays visible: the broker routes by it. Format 3 (session 22: the envelope not
//!   compressed, the label `"elfiee sealed 3"`) is still read. Compressed before it is
//!   encrypted (decision 0051): the broker stores and sends about a third of the bytes.
//! - **A device's copy of a key** ([`KeyCopy`]), on `elf.<doc>.key.<recipient>`: sealed to
//!   the recipient's X25519 key (its Ed25519 key in Montgomery form) with an ephemeral
//!   X25519 key, HKDF-SHA256 and the same AEAD, and signed by the device that sealed it.
//! - **Bodies** travel on `elf.<doc>.blob.<name>`, `name` a keyed blake3 of the body's
//!   hash under the key ([`DocKey::blob_name`]): the broker cannot confirm a guessed body.

use std::collections::BTreeMap;
use std::fmt;

use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::XChaCha20Poly1305;
use elfiee_model::EventHash;
use serde::{Deserialize, Serialize};

use crate::identity::{sig_bytes, NodeId, NodeKey, Rejection};

/// The format of a sealed envelope this build writes (it reads [`SEALED_VERSION`] and 3).
pub const SEALED_VERSION: u8 = 4;
/// The sealed format before compression (still read).
pub const SEALED_V3: u8 = 3;

/// Whether this build reads sealed format `v`.
fn readable(v: u8) -> bool {
    v == SEALED_VERSION || v == SEALED_V3
}
/// The largest envelope a sealed one opens to (the broker's largest message, 64 MiB): a
/// forged length in front of a compressed envelope asks for no more memory than this.
pub const MAX_ENVELOPE_BYTES: usize = 64 << 20;
/// The format of a key copy.
pub const KEY_COPY_VERSION: u8 = 1;

const NONCE: usize = 24;

/// A document key of one generation. Never printed (its `Debug` shows the generation and
/// id only).
#[derive(Clone)]
pub struct DocKey {
    pub gen: u32,
    /// blake3 of the key, first 8 bytes (little-endian): how messages name it.
    pub id: u64,
    /// The device that sealed this device's copy (or made it).
    pub sealer: NodeId,
    key: [u8; 32],
}

impl fmt::Debug for DocKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DocKey(gen {}, id {:016x})", self.gen, self.id)
    }
}

impl DocKey {
    /// A new random key of generation `gen`, made by `maker`.
    pub fn generate(gen: u32, maker: NodeId) -> DocKey {
        let key: [u8; 32] = XChaCha20Poly1305::generate_key(&mut OsRng).into();
        DocKey::of(gen, key, maker)
    }

    fn of(gen: u32, key: [u8; 32], sealer: NodeId) -> DocKey {
        let mut h = blake3::Hasher::new();
        h.update(b"elfiee key id");
        h.update(&key);
        let id = u64::from_le_bytes(h.finalize().as_bytes()[..8].try_into().unwrap_or_default());
        DocKey {
            gen,
            id,
            sealer,
            key,
        }
    }

    /// nonce ‖ ciphertext of `plain` with `aad` bound to it.
    pub fn encrypt(&self, aad: &[u8], plain: &[u8]) -> Vec<u8> {
        encrypt(&self.key, aad, plain)
    }

    pub fn decrypt(&self, aad: &[u8], sealed: &[u8]) -> Result<Vec<u8>, Rejection> {
        decrypt(&self.key, aad, sealed)
    }

    /// The name a body travels under: blake3 keyed with a key derived from this one, of the
    /// body's hash (hex).
    pub fn blob_name(&self, hash: &EventHash) -> String {
        let names = blake3::derive_key("elfiee blob names 1", &self.key);
        EventHash(*blake3::keyed_hash(&names, &hash.0).as_bytes()).to_hex()
    }

    /// What a body chunk's encryption binds: its name, its place and the chunk count.
    pub fn chunk_aad(name: &str, n: usize, chunks: usize) -> Vec<u8> {
        format!("elfiee chunk 1:{name}:{n}/{chunks}").into_bytes()
    }
}

fn encrypt(key: &[u8; 32], aad: &[u8], plain: &[u8]) -> Vec<u8> {
    let cipher = XChaCha20Poly1305::new(key.into());
    let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
    let mut out = Vec::with_capacity(NONCE + plain.len() + 16);
    out.extend_from_slice(&nonce);
    // Encrypting into a Vec fails only past the AEAD's length limit (256 GiB).
    out.extend(
        cipher
            .encrypt(&nonce, Payload { msg: plain, aad })
            .unwrap_or_default(),
    );
    out
}

fn decrypt(key: &[u8; 32], aad: &[u8], sealed: &[u8]) -> Result<Vec<u8>, Rejection> {
    if sealed.len() < NONCE + 16 {
        return Err(Rejection::Undecryptable);
    }
    let cipher = XChaCha20Poly1305::new(key.into());
    let (nonce, ct) = sealed.split_at(NONCE);
    cipher
        .decrypt(nonce.into(), Payload { msg: ct, aad })
        .map_err(|_| Rejection::Undecryptable)
}

/// The keys a device holds, by id.
#[derive(Default, Debug, Clone)]
pub struct Keyring {
    keys: BTreeMap<u64, DocKey>,
}

impl Keyring {
    pub fn insert(&mut self, key: DocKey) {
        self.keys.entry(key.id).or_insert(key);
    }

    pub fn get(&self, id: u64) -> Option<&DocKey> {
        self.keys.get(&id)
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// How many keys it holds.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Every key, oldest generation first.
    pub fn keys(&self) -> Vec<&DocKey> {
        let mut v: Vec<&DocKey> = self.keys.values().collect();
        v.sort_by_key(|k| (k.gen, k.id));
        v
    }

    /// The key to write with: the newest generation whose copy a device in `trusted` sealed
    /// (any key that opens reads, but one sealed by a stranger — or the broker — is never
    /// written with).
    pub fn current(&self, trusted: impl Fn(&NodeId) -> bool) -> Option<&DocKey> {
        self.keys
            .values()
            .filter(|k| trusted(&k.sealer))
            .max_by_key(|k| (k.gen, k.id))
    }
}

/// A sealed envelope as it is written and read (format 4, or 3).
#[derive(Serialize, Deserialize)]
struct SealedWire {
    v: u8,
    node: NodeId,
    gen: u32,
    kid: u64,
    #[serde(with = "bin")]
    body: Vec<u8>,
}

/// A sealed envelope, read: which key opens it, and the ciphertext.
#[derive(Debug)]
pub struct Sealed {
    /// Its format (4, or 3).
    pub v: u8,
    pub node: NodeId,
    pub gen: u32,
    pub kid: u64,
    body: Vec<u8>,
}

/// Which key opens a sealed envelope ([`Sealed::read_header`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealedHeader {
    pub gen: u32,
    pub kid: u64,
}

impl Sealed {
    /// `plain` (a format 2 envelope of `node`'s) compressed and encrypted with `key` for
    /// document `doc`.
    pub fn seal(key: &DocKey, doc: &str, node: &NodeId, plain: &[u8]) -> Vec<u8> {
        let packed = lz4_flex::compress_prepend_size(plain);
        let body = key.encrypt(
            &aad(b"elfiee sealed 4", doc, node, key.gen, key.id),
            &packed,
        );
        let wire = SealedWire {
            v: SEALED_VERSION,
            node: *node,
            gen: key.gen,
            kid: key.id,
            body,
        };
        // Plain data into a Vec: cannot fail.
        rmp_serde::to_vec_named(&wire).unwrap_or_default()
    }

    /// `Some` when `bytes` are a sealed envelope (else they are an older, plain format).
    pub fn read(bytes: &[u8]) -> Option<Sealed> {
        let w: SealedWire = rmp_serde::from_slice(bytes).ok()?;
        readable(w.v).then_some(Sealed {
            v: w.v,
            node: w.node,
            gen: w.gen,
            kid: w.kid,
            body: w.body,
        })
    }

    /// Which key a sealed envelope needs, without copying its ciphertext; `None` when
    /// `bytes` are not a sealed envelope.
    pub fn read_header(bytes: &[u8]) -> Option<SealedHeader> {
        // The ciphertext (`body`) is not named, so it is skipped.
        #[derive(Deserialize)]
        struct HeaderWire {
            v: u8,
            gen: u32,
            kid: u64,
        }
        let w: HeaderWire = rmp_serde::from_slice(bytes).ok()?;
        readable(w.v).then_some(SealedHeader {
            gen: w.gen,
            kid: w.kid,
        })
    }

    /// The format of a sealed envelope newer than this build reads (`Some(5)` for a later
    /// build's format 5), so it is refused by name rather than as a malformed older message.
    pub fn newer_format(bytes: &[u8]) -> Option<u8> {
        #[derive(Deserialize)]
        struct Wrapper {
            v: u8,
            #[allow(dead_code)]
            node: NodeId,
        }
        let w: Wrapper = rmp_serde::from_slice(bytes).ok()?;
        (w.v > SEALED_VERSION).then_some(w.v)
    }

    /// The envelope inside, with `key` (the one [`Sealed::kid`] names).
    pub fn open(&self, key: &DocKey, doc: &str) -> Result<Vec<u8>, Rejection> {
        if self.v == SEALED_V3 {
            return key.decrypt(
                &aad(b"elfiee sealed 3", doc, &self.node, self.gen, self.kid),
                &self.body,
            );
        }
        let packed = key.decrypt(
            &aad(b"elfiee sealed 4", doc, &self.node, self.gen, self.kid),
            &self.body,
        )?;
        // Authenticated, so made by a member device; still bounded before any allocation.
        let bad = |why: String| Rejection::Malformed(format!("a compressed envelope: {why}"));
        let (len, rest) =
            lz4_flex::block::uncompressed_size(&packed).map_err(|e| bad(e.to_string()))?;
        if len > MAX_ENVELOPE_BYTES {
            return Err(bad(format!(
                "it says it opens to {len} bytes, more than the {MAX_ENVELOPE_BYTES} an envelope may hold"
            )));
        }
        let mut plain = vec![0; len];
        let n =
            lz4_flex::block::decompress_into(rest, &mut plain).map_err(|e| bad(e.to_string()))?;
        if n != len {
            return Err(bad(format!(
                "it opened to {n} bytes, not the {len} it says"
            )));
        }
        Ok(plain)
    }
}

/// What a sealed envelope's or a key copy's encryption binds: `label` ‖ doc ‖ 0 ‖ node (the
/// envelope's, or the copy's recipient) ‖ gen ‖ kid.
fn aad(label: &[u8], doc: &str, node: &NodeId, gen: u32, kid: u64) -> Vec<u8> {
    let mut aad = label.to_vec();
    aad.extend_from_slice(doc.as_bytes());
    aad.push(0);
    aad.extend_from_slice(&node.0);
    aad.extend_from_slice(&gen.to_le_bytes());
    aad.extend_from_slice(&kid.to_le_bytes());
    aad
}

/// One device's copy of a document key, as it travels on `elf.<doc>.key.<to>`.
#[derive(Serialize, Deserialize)]
pub struct KeyCopy {
    pub v: u8,
    pub gen: u32,
    pub kid: u64,
    /// The device that sealed it (and signed this copy).
    pub from: NodeId,
    pub to: NodeId,
    /// The ephemeral X25519 public key.
    eph: NodeId,
    /// nonce ‖ AEAD(key).
    #[serde(with = "bin")]
    body: Vec<u8>,
    #[serde(with = "sig_bytes")]
    sig: [u8; 64],
}

impl KeyCopy {
    /// `key` sealed to `to` by `sealer`; `None` when `to` is no Ed25519 key.
    pub fn seal(key: &DocKey, doc: &str, to: &NodeId, sealer: &NodeKey) -> Option<Vec<u8>> {
        let their = to.agreement_key()?;
        let eph = x25519_dalek::EphemeralSecret::random_from_rng(OsRng);
        let eph_pub = x25519_dalek::PublicKey::from(&eph);
        let shared = eph.diffie_hellman(&their);
        if !shared.was_contributory() {
            return None;
        }
        let wrap = wrap_key(shared.as_bytes(), eph_pub.as_bytes(), their.as_bytes(), doc);
        let body = encrypt(
            &wrap,
            &aad(b"elfiee key copy 1", doc, to, key.gen, key.id),
            &key.key,
        );
        let mut copy = KeyCopy {
            v: KEY_COPY_VERSION,
            gen: key.gen,
            kid: key.id,
            from: sealer.node(),
            to: *to,
            eph: NodeId(eph_pub.to_bytes()),
            body,
            sig: [0; 64],
        };
        copy.sig = sealer.sign(&copy.signed_hash(doc));
        Some(rmp_serde::to_vec_named(&copy).unwrap_or_default())
    }

    pub fn read(bytes: &[u8]) -> Result<KeyCopy, Rejection> {
        let c: KeyCopy =
            rmp_serde::from_slice(bytes).map_err(|e| Rejection::Malformed(e.to_string()))?;
        if c.v != KEY_COPY_VERSION {
            return Err(Rejection::Malformed(format!(
                "a key copy of format {} (this program reads {KEY_COPY_VERSION})",
                c.v
            )));
        }
        Ok(c)
    }

    /// The key inside, for `me` (its signature checked against its sealer's key; whether the
    /// sealer may be trusted to write with it is [`Keyring::current`]'s question).
    pub fn open(&self, doc: &str, me: &NodeKey) -> Result<DocKey, Rejection> {
        if self.to != me.node() {
            return Err(Rejection::Malformed("a key copy for another device".into()));
        }
        let from = ed25519_dalek::VerifyingKey::from_bytes(&self.from.0)
            .map_err(|_| Rejection::BadSignature(self.from.to_hex()))?;
        ed25519_dalek::Verifier::verify(
            &from,
            &self.signed_hash(doc),
            &ed25519_dalek::Signature::from_bytes(&self.sig),
        )
        .map_err(|_| Rejection::BadSignature(self.from.to_hex()))?;
        let eph = x25519_dalek::PublicKey::from(self.eph.0);
        let secret = me.agreement_secret();
        let mine = x25519_dalek::PublicKey::from(&secret);
        let shared = secret.diffie_hellman(&eph);
        let wrap = wrap_key(shared.as_bytes(), eph.as_bytes(), mine.as_bytes(), doc);
        let key: [u8; 32] = decrypt(
            &wrap,
            &aad(b"elfiee key copy 1", doc, &self.to, self.gen, self.kid),
            &self.body,
        )?
        .try_into()
        .map_err(|_| Rejection::Undecryptable)?;
        let key = DocKey::of(self.gen, key, self.from);
        if key.id != self.kid {
            return Err(Rejection::Undecryptable);
        }
        Ok(key)
    }

    fn signed_hash(&self, doc: &str) -> [u8; 32] {
        let mut h = blake3::Hasher::new();
        h.update(b"elfiee key copy 1");
        h.update(doc.as_bytes());
        h.update(&[0]);
        h.update(&self.to.0);
        h.update(&self.gen.to_le_bytes());
        h.update(&self.kid.to_le_bytes());
        h.update(&self.from.0);
        h.update(&self.eph.0);
        h.update(&self.body);
        *h.finalize().as_bytes()
    }
}

/// HKDF-SHA256 of the shared secret, salted with both public keys, bound to the document.
fn wrap_key(shared: &[u8; 32], eph: &[u8; 32], to: &[u8; 32], doc: &str) -> [u8; 32] {
    let mut salt = [0u8; 64];
    salt[..32].copy_from_slice(eph);
    salt[32..].copy_from_slice(to);
    let hk = hkdf::Hkdf::<sha2::Sha256>::new(Some(&salt), shared);
    let mut out = [0u8; 32];
    let info = [b"elfiee doc key 1:".as_slice(), doc.as_bytes()].concat();
    // 32 bytes is far under HKDF-SHA256's limit (8,160).
    let _ = hk.expand(&info, &mut out);
    out
}

/// `Vec<u8>` as MessagePack `bin`.
mod bin {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(b)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        Ok(elfiee_model::RawBytes::deserialize(d)?.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_devices_agreement_key_is_its_node_id_in_montgomery_form() {
        let key = NodeKey::from_seed([7; 32]);
        let secret = key.agreement_secret();
        assert_eq!(
            x25519_dalek::PublicKey::from(&secret).to_bytes(),
            key.node().agreement_key().unwrap().to_bytes()
        );
    }

    #[test]
    fn a_key_copy_opens_for_its_device_only_and_names_its_sealer() {
        let (owner, b, c) = (
            NodeKey::from_seed([1; 32]),
            NodeKey::from_seed([2; 32]),
            NodeKey::from_seed([3; 32]),
        );
        let key = DocKey::generate(4, owner.node());
        let copy = KeyCopy::seal(&key, "doc", &b.node(), &owner).unwrap();
        let read = KeyCopy::read(&copy).unwrap();
        let opened = read.open("doc", &b).unwrap();
        assert_eq!(
            (opened.gen, opened.id, opened.sealer),
            (4, key.id, owner.node())
        );
        assert!(read.open("doc", &c).is_err(), "another device");
        assert!(read.open("other", &b).is_err(), "another document");
        // Altered in transit: the signature no longer verifies.
        let mut altered = KeyCopy::read(&copy).unwrap();
        altered.body[30] ^= 1;
        assert_eq!(
            altered.open("doc", &b).err(),
            Some(Rejection::BadSignature(owner.node().to_hex()))
        );
    }

    #[test]
    fn a_sealed_envelope_hides_its_text_and_opens_with_its_key_only() {
        let node = NodeKey::from_seed([1; 32]).node();
        let key = DocKey::generate(0, node);
        let plain = b"a marker: SECRET-TEXT-42".to_vec();
        let sealed = Sealed::seal(&key, "doc", &node, &plain);
        assert!(!sealed.windows(6).any(|w| w == b"SECRET"));
        let read = Sealed::read(&sealed).unwrap();
        assert_eq!((read.node, read.gen, read.kid), (node, 0, key.id));
        assert_eq!(read.open(&key, "doc").unwrap(), plain);
        let other = DocKey::generate(0, node);
        assert_eq!(read.open(&other, "doc"), Err(Rejection::Undecryptable));
        assert_eq!(read.open(&key, "doc2"), Err(Rejection::Undecryptable));
        // Its header names the same key, without the ciphertext.
        assert_eq!(
            Sealed::read_header(&sealed),
            Some(SealedHeader {
                gen: 0,
                kid: key.id
            })
        );
        // An older, plain envelope is not read as a sealed one.
        assert!(Sealed::read(b"\x80").is_none());
        assert!(Sealed::read_header(b"\x80").is_none());
    }

    /// A format 3 envelope (session 22's, not compressed) as that build sealed it.
    fn sealed_v3(key: &DocKey, doc: &str, node: &NodeId, plain: &[u8]) -> Vec<u8> {
        let body = key.encrypt(&aad(b"elfiee sealed 3", doc, node, key.gen, key.id), plain);
        let wire = SealedWire {
            v: SEALED_V3,
            node: *node,
            gen: key.gen,
            kid: key.id,
            body,
        };
        rmp_serde::to_vec_named(&wire).unwrap()
    }

    #[test]
    fn envelopes_are_compressed_and_every_size_and_the_older_format_open() {
        let node = NodeKey::from_seed([1; 32]).node();
        let key = DocKey::generate(0, node);
        // Empty, one byte, text that repeats (as a block's writes do), bytes that do not
        // compress, and a large envelope.
        let noise: Vec<u8> = (0..70_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let repeated = "# Notes\r\n\tline of a block that is written again\n".repeat(400);
        let large = repeated.repeat(60);
        for plain in [
            &b""[..],
            b"x",
            repeated.as_bytes(),
            &noise,
            large.as_bytes(),
        ] {
            let sealed = Sealed::seal(&key, "doc", &node, plain);
            let read = Sealed::read(&sealed).unwrap();
            assert_eq!(read.v, SEALED_VERSION);
            assert_eq!(
                read.open(&key, "doc").unwrap(),
                plain,
                "{} bytes",
                plain.len()
            );
            if plain.len() > 1000 && plain != &noise[..] {
                assert!(
                    sealed.len() * 4 < plain.len(),
                    "compressed: {} of {}",
                    sealed.len(),
                    plain.len()
                );
            }
        }
        // A later build's format is named, not taken for an older plain message.
        let mut later =
            rmp_serde::from_slice::<SealedWire>(&Sealed::seal(&key, "doc", &node, b"x")).unwrap();
        later.v = SEALED_VERSION + 1;
        let later = rmp_serde::to_vec_named(&later).unwrap();
        assert!(Sealed::read(&later).is_none());
        assert_eq!(Sealed::newer_format(&later), Some(SEALED_VERSION + 1));
        assert_eq!(
            Sealed::newer_format(&Sealed::seal(&key, "doc", &node, b"x")),
            None
        );
        assert_eq!(Sealed::newer_format(b"\x80"), None);
        // Format 3 (session 22's builds) still opens; its header names its key.
        let old = sealed_v3(&key, "doc", &node, b"from an older build");
        let read = Sealed::read(&old).unwrap();
        assert_eq!(read.v, SEALED_V3);
        assert_eq!(read.open(&key, "doc").unwrap(), b"from an older build");
        assert_eq!(Sealed::read_header(&old).map(|h| h.kid), Some(key.id));
    }

    #[test]
    fn a_compressed_envelope_that_claims_too_much_is_refused_before_any_allocation() {
        let node = NodeKey::from_seed([1; 32]).node();
        let key = DocKey::generate(0, node);
        let seal_packed = |packed: &[u8]| {
            let body = key.encrypt(
                &aad(b"elfiee sealed 4", "doc", &node, key.gen, key.id),
                packed,
            );
            rmp_serde::to_vec_named(&SealedWire {
                v: SEALED_VERSION,
                node,
                gen: key.gen,
                kid: key.id,
                body,
            })
            .unwrap()
        };
        // A length of 4 GiB in front of a few bytes.
        let mut forged = u32::MAX.to_le_bytes().to_vec();
        forged.extend_from_slice(b"\x10abc");
        let e = Sealed::read(&seal_packed(&forged))
            .unwrap()
            .open(&key, "doc")
            .unwrap_err();
        assert!(
            matches!(&e, Rejection::Malformed(m) if m.contains("more than")),
            "{e:?}"
        );
        // A length that does not match what the block holds.
        let mut short = lz4_flex::compress_prepend_size(b"some text of an envelope");
        short[0] += 5;
        let e = Sealed::read(&seal_packed(&short))
            .unwrap()
            .open(&key, "doc")
            .unwrap_err();
        assert!(matches!(e, Rejection::Malformed(_)), "{e:?}");
        // Fewer than four bytes: no length at all.
        let e = Sealed::read(&seal_packed(b"\x01"))
            .unwrap()
            .open(&key, "doc")
            .unwrap_err();
        assert!(matches!(e, Rejection::Malformed(_)), "{e:?}");
    }

    #[test]
    fn the_keyring_writes_with_the_newest_trusted_generation() {
        let (a, stranger) = (NodeId([1; 32]), NodeId([9; 32]));
        let mut ring = Keyring::default();
        ring.insert(DocKey::generate(0, a));
        ring.insert(DocKey::generate(1, a));
        ring.insert(DocKey::generate(5, stranger));
        assert_eq!(ring.current(|n| *n == a).map(|k| k.gen), Some(1));
        assert_eq!(ring.keys().len(), 3);
        assert!(ring.current(|_| false).is_none());
    }
}
