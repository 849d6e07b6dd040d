//! How a device reaches a locked broker (issue 40): TLS (`tls://` URLs, the system roots or a
//! CA file, an optional client certificate) and credentials (user and password — also in the
//! URL, `nats://user:pass@host:4222` — a token, an nkey seed file or a NATS `.creds` file).
//!
//! [`BrokerAccess`] lives in memory only: [`BrokerAccess::from_url`] takes credentials out of
//! the URL, so what is recorded in the `.elf` and shown in the status is the bare address.
//! Its `Debug` names what is set, never a secret. [`BrokerAccess::check`] connects once
//! without retrying and turns a refusal into one line that says which part was refused
//! ([`Refusal`]); an unreachable broker is not a refusal (a device works offline).

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::{ConnectErrorKind, ConnectOptions};

/// TLS settings and credentials for the broker (see the module docs).
#[derive(Clone, Default, PartialEq)]
pub struct BrokerAccess {
    pub user: Option<String>,
    pub password: Option<String>,
    pub token: Option<String>,
    /// A NATS credentials file (a user JWT and its nkey seed, as `nsc` writes it).
    pub creds: Option<PathBuf>,
    /// A file holding an nkey seed (`SU…`), for brokers that list users by nkey.
    pub nkey: Option<PathBuf>,
    /// CA certificates (PEM) that sign the broker's certificate, instead of the system roots.
    pub tls_ca: Option<PathBuf>,
    /// A client certificate (PEM) and its key, for brokers that verify clients.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// TLS whatever the broker offers (a `tls://` URL, or a CA or client certificate given).
    pub require_tls: bool,
}

impl std::fmt::Debug for BrokerAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerAccess")
            .field("credentials", &self.credentials())
            .field("tls_ca", &self.tls_ca)
            .field("tls_cert", &self.tls_cert)
            .field("require_tls", &self.require_tls)
            .finish()
    }
}

/// Why the broker would not have this device, in one line that names the cause.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

impl BrokerAccess {
    /// Splits `url` into the bare address (returned: no user, no password) and `self` with
    /// the URL's user and password added (the flags' take precedence); `tls://` asks for TLS.
    pub fn from_url(self, url: &str) -> Result<(String, BrokerAccess), String> {
        // A cluster's servers, comma-separated: each loses its credentials (the first
        // server's are used, as NATS clients do).
        let mut access = self;
        let mut bare = Vec::new();
        for part in url.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (b, a) = access.take_from_one_url(part)?;
            bare.push(b);
            access = a;
        }
        if bare.is_empty() {
            return Err(format!("'{}' names no broker", redact(url)));
        }
        Ok((bare.join(","), access))
    }

    fn take_from_one_url(mut self, url: &str) -> Result<(String, BrokerAccess), String> {
        let addr = url
            .parse::<async_nats::ServerAddr>()
            .map_err(|e| format!("'{}' is not a NATS broker address ({e})", redact(url)))?;
        let mut parsed = addr.into_inner();
        if parsed.scheme() == "tls" {
            self.require_tls = true;
        }
        if !parsed.username().is_empty() {
            let decode = |s: &str| {
                percent_decode(s).ok_or_else(|| {
                    "the broker URL's credentials are not valid percent-encoding".to_owned()
                })
            };
            let user = decode(parsed.username())?;
            let pass = parsed.password().map(decode).transpose()?;
            match pass {
                // `nats://TOKEN@host`: a token alone, as NATS clients read it.
                None => {
                    self.token.get_or_insert(user);
                }
                Some(p) => {
                    self.user.get_or_insert(user);
                    self.password.get_or_insert(p);
                }
            }
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
        }
        if self.tls_ca.is_some() || self.tls_cert.is_some() {
            self.require_tls = true;
        }
        // A bare `host:port` parses with its scheme; keep what the user wrote otherwise.
        let bare = if url.contains("://") {
            parsed.to_string().trim_end_matches('/').to_owned()
        } else {
            url.to_owned()
        };
        Ok((bare, self))
    }

    /// Which credentials are set, by kind (`"user alice and a password"`, `"a token"`,
    /// `"the nkey file …"`, `"the credentials file …"`), or `None`.
    pub fn credentials(&self) -> Option<String> {
        let mut kinds = Vec::new();
        match (&self.user, &self.password) {
            (Some(u), Some(_)) => kinds.push(format!("user '{u}' and a password")),
            (Some(u), None) => kinds.push(format!("user '{u}' without a password")),
            (None, Some(_)) => kinds.push("a password without a user".to_owned()),
            (None, None) => {}
        }
        if self.token.is_some() {
            kinds.push("a token".to_owned());
        }
        if let Some(p) = &self.nkey {
            kinds.push(format!("the nkey seed in {}", p.display()));
        }
        if let Some(p) = &self.creds {
            kinds.push(format!("the credentials file {}", p.display()));
        }
        (!kinds.is_empty()).then(|| kinds.join(" and "))
    }

    /// The client options for these settings (files read now: a missing or unreadable one
    /// is a [`Refusal`] naming it).
    pub async fn options(&self) -> Result<ConnectOptions, Refusal> {
        let mut o = ConnectOptions::new();
        for (what, path) in [
            ("CA file (--tls-ca)", &self.tls_ca),
            ("client certificate (--tls-cert)", &self.tls_cert),
            ("client key (--tls-key)", &self.tls_key),
            ("nkey seed file (--nkey)", &self.nkey),
            ("credentials file (--creds)", &self.creds),
        ] {
            if let Some(p) = path {
                readable(what, p)?;
            }
        }
        if let Some(ca) = &self.tls_ca {
            o = o.add_root_certificates(ca.clone());
        }
        match (&self.tls_cert, &self.tls_key) {
            (Some(c), Some(k)) => o = o.add_client_certificate(c.clone(), k.clone()),
            (None, None) => {}
            _ => {
                return Err(Refusal(
                    "a client certificate needs both --tls-cert and --tls-key".into(),
                ))
            }
        }
        if self.require_tls {
            o = o.require_tls(true);
        }
        match (&self.user, &self.password) {
            (Some(u), Some(p)) => o = o.user_and_password(u.clone(), p.clone()),
            (None, None) => {}
            _ => {
                return Err(Refusal(
                    "a broker user needs both a user name and a password (--user, --password)"
                        .into(),
                ))
            }
        }
        if let Some(t) = &self.token {
            o = o.token(t.clone());
        }
        if let Some(p) = &self.nkey {
            let seed = std::fs::read_to_string(p).map_err(|e| {
                Refusal(format!(
                    "cannot read the nkey seed file {}: {e}",
                    p.display()
                ))
            })?;
            let seed = seed
                .lines()
                .map(str::trim)
                .find(|l| l.starts_with("SU"))
                .ok_or_else(|| {
                    Refusal(format!(
                        "{} holds no user nkey seed (a line starting with SU)",
                        p.display()
                    ))
                })?;
            o = o.nkey(seed.to_owned());
        }
        if let Some(p) = &self.creds {
            o = o.credentials_file(p).await.map_err(|e| {
                Refusal(format!(
                    "the credentials file {} is not usable: {e}",
                    p.display()
                ))
            })?;
        }
        Ok(o)
    }

    /// Connects to `url` once, without retrying: `Ok` when the broker took this device or
    /// could not be reached (sync then starts offline and retries); a [`Refusal`] naming the
    /// cause when the broker refused the credentials or TLS could not be set up.
    pub async fn check(&self, url: &str, timeout: Duration) -> Result<(), Refusal> {
        let o = self.options().await?.connection_timeout(timeout);
        let addrs = server_addrs(url).map_err(Refusal)?;
        match tokio::time::timeout(timeout * 2, o.connect(addrs)).await {
            Ok(Ok(client)) => {
                drop(client);
                Ok(())
            }
            Ok(Err(e)) => {
                let said = chain(&e);
                match e.kind() {
                    ConnectErrorKind::AuthorizationViolation | ConnectErrorKind::Authentication => {
                        Err(Refusal(self.refused_credentials(url)))
                    }
                    ConnectErrorKind::Tls => Err(Refusal(self.refused_tls(url, &said))),
                    // The client reports a failed TLS handshake as an I/O error.
                    ConnectErrorKind::Io if tls_failure(&said) => {
                        Err(Refusal(self.refused_tls(url, &said)))
                    }
                    _ => Ok(()),
                }
            }
            Err(_) => Ok(()),
        }
    }

    fn refused_credentials(&self, url: &str) -> String {
        match self.credentials() {
            None => format!(
                "the broker {url} refused this device: no credentials were given (give them with --user/--password, --token, --nkey or --creds, or ELFIEE_SYNC_USER/ELFIEE_SYNC_PASSWORD, ELFIEE_SYNC_TOKEN, ELFIEE_SYNC_NKEY, ELFIEE_SYNC_CREDS)"
            ),
            Some(given) => {
                format!("the broker {url} refused the credentials given: {given} (authorization violation)")
            }
        }
    }

    fn refused_tls(&self, url: &str, error: &str) -> String {
        let trusted = match &self.tls_ca {
            Some(ca) => format!("the CA file {}", ca.display()),
            None => "the system's root certificates (give the broker's CA with --tls-ca or ELFIEE_SYNC_TLS_CA)".to_owned(),
        };
        // The broker's alert about this side's certificate (Go's servers say "bad
        // certificate" when none was sent).
        let about_ours = [
            "CertificateRequired",
            "certificate required",
            "BadCertificate",
        ]
        .iter()
        .any(|w| error.contains(w));
        if about_ours {
            match &self.tls_cert {
                None => format!(
                    "the broker {url} asks for a client certificate: give one with --tls-cert and --tls-key (or ELFIEE_SYNC_TLS_CERT, ELFIEE_SYNC_TLS_KEY) ({error})"
                ),
                Some(c) => format!(
                    "the broker {url} refused the client certificate {} ({error})",
                    c.display()
                ),
            }
        } else if error.contains("UnknownIssuer")
            || error.contains("certificate") && !error.contains("required")
        {
            format!("cannot trust the broker {url}: its certificate is not signed by {trusted} ({error})")
        } else {
            format!("TLS with the broker {url} failed: {error} (trusting {trusted})")
        }
    }
}

/// The replicas and the cluster leader of a stream, from its info.
pub(crate) fn replication(
    info: &async_nats::jetstream::stream::Info,
) -> (Option<usize>, Option<String>) {
    let leader = info
        .cluster
        .as_ref()
        .and_then(|c| c.leader.clone())
        .filter(|l| !l.is_empty());
    (Some(info.config.num_replicas.max(1)), leader)
}

/// The servers of a broker URL (one, or a cluster's, comma-separated).
pub fn server_addrs(url: &str) -> Result<Vec<async_nats::ServerAddr>, String> {
    url.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.parse::<async_nats::ServerAddr>()
                .map_err(|e| format!("'{}' is not a NATS broker address ({e})", redact(p)))
        })
        .collect()
}

/// An error and its sources, joined by ": ".
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        source = s.source();
    }
    text
}

/// Whether an I/O error's words are those of a TLS handshake that failed (rustls's).
fn tls_failure(said: &str) -> bool {
    let said = said.to_lowercase();
    ["certificate", "handshake", "tls", "alert"]
        .iter()
        .any(|w| said.contains(w))
}

/// `url` with any password or token replaced by `***` (for messages).
pub fn redact(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('@') {
            Some((_, host)) => format!("{scheme}://***@{host}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

fn readable(what: &str, p: &Path) -> Result<(), Refusal> {
    std::fs::File::open(p)
        .map(drop)
        .map_err(|e| Refusal(format!("cannot read the {what} {}: {e}", p.display())))
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_the_url_leave_it_and_are_never_shown() {
        let (bare, a) = BrokerAccess::default()
            .from_url("nats://alice:s%40cret@127.0.0.1:4222")
            .unwrap();
        assert_eq!(bare, "nats://127.0.0.1:4222");
        assert_eq!(a.user.as_deref(), Some("alice"));
        assert_eq!(a.password.as_deref(), Some("s@cret"));
        assert!(!format!("{a:?}").contains("s@cret"));
        assert!(format!("{a:?}").contains("user 'alice' and a password"));
        assert_eq!(redact("nats://alice:s%40cret@h:1"), "nats://***@h:1");
    }

    #[test]
    fn a_cluster_url_lists_every_server_without_credentials() {
        let (bare, a) = BrokerAccess::default()
            .from_url("nats://u:p@127.0.0.1:1, nats://127.0.0.1:2")
            .unwrap();
        assert_eq!(bare, "nats://127.0.0.1:1,nats://127.0.0.1:2");
        assert_eq!(a.user.as_deref(), Some("u"));
        assert_eq!(server_addrs(&bare).unwrap().len(), 2);
    }

    #[test]
    fn a_tls_url_or_a_ca_asks_for_tls_and_flags_win_over_the_url() {
        let (bare, a) = BrokerAccess::default()
            .from_url("tls://TOKEN1@127.0.0.1:4222")
            .unwrap();
        assert_eq!(bare, "tls://127.0.0.1:4222");
        assert!(a.require_tls);
        assert_eq!(a.token.as_deref(), Some("TOKEN1"));
        let given = BrokerAccess {
            user: Some("bob".into()),
            password: Some("flag".into()),
            tls_ca: Some("ca.pem".into()),
            ..Default::default()
        };
        let (_, a) = given.from_url("nats://alice:url@h:1").unwrap();
        assert_eq!(
            (a.user.as_deref(), a.password.as_deref()),
            (Some("bob"), Some("flag"))
        );
        assert!(a.require_tls);
    }
}
