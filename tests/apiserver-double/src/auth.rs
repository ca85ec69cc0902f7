//! Authentication as kube-apiserver does it: bearer tokens (which can expire, as bound
//! service-account tokens and exec-plugin tokens do) and TLS client certificates, checked
//! against the client CA at the time of each request (an expired certificate gets 401, not a
//! failed handshake, because kube-apiserver only requests a certificate during the handshake
//! and verifies it in its x509 authenticator). A request that presents credentials none of
//! which is valid is 401; one that presents none is `system:anonymous`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;

/// Bearer tokens the server accepts: token to user, with an optional expiry. Shared with the
/// running server: tests add, expire and revoke tokens while clients use them.
#[derive(Debug, Default)]
pub struct Tokens(Mutex<HashMap<String, Token>>);

#[derive(Debug, Clone)]
struct Token {
    user: String,
    expires: Option<SystemTime>,
}

impl Tokens {
    pub(crate) fn with(initial: &HashMap<String, String>) -> Tokens {
        let tokens = Tokens::default();
        for (token, user) in initial {
            tokens.add(token, user, None);
        }
        tokens
    }

    /// Accept `token` as `user` until `expires` (for ever with `None`).
    pub fn add(&self, token: &str, user: &str, expires: Option<SystemTime>) {
        let token_entry = Token {
            user: user.to_owned(),
            expires,
        };
        self.lock().insert(token.to_owned(), token_entry);
    }

    /// Stop accepting `token`.
    pub fn revoke(&self, token: &str) {
        self.lock().remove(token);
    }

    /// The user of a token that is known and not expired.
    pub(crate) fn user(&self, token: &str) -> Option<String> {
        let tokens = self.lock();
        let entry = tokens.get(token)?;
        let valid = entry.expires.is_none_or(|at| SystemTime::now() < at);
        valid.then(|| entry.user.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Token>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The CA client certificates must chain to; replaceable while the server runs (a CA
/// rotation), and checked at each request.
pub struct ClientCa {
    provider: Arc<CryptoProvider>,
    verifier: RwLock<Option<Arc<dyn ClientCertVerifier>>>,
}

impl ClientCa {
    pub(crate) fn new(provider: Arc<CryptoProvider>) -> ClientCa {
        ClientCa {
            provider,
            verifier: RwLock::new(None),
        }
    }

    /// Trust the certificates in `pem` (one or more) from now on, and only them.
    pub fn set(&self, pem: &str) -> Result<(), String> {
        let mut roots = RootCertStore::empty();
        for der in crate::tls::certificates(pem)? {
            roots
                .add(der)
                .map_err(|e| format!("not a CA certificate: {e}"))?;
        }
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), self.provider.clone())
                .allow_unauthenticated()
                .build()
                .map_err(|e| format!("client CA: {e}"))?;
        *self
            .verifier
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(verifier);
        Ok(())
    }

    /// The user a certificate chain names (its subject's common name), if it chains to the
    /// client CA, is valid now, and is for client authentication.
    pub(crate) fn user(&self, chain: &[CertificateDer<'static>]) -> Result<String, String> {
        let verifier = self
            .verifier
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
            .ok_or("no client CA configured")?;
        let (leaf, intermediates) = chain.split_first().ok_or("no certificate")?;
        verifier
            .verify_client_cert(leaf, intermediates, UnixTime::now())
            .map_err(|e| format!("verifying certificate: {e}"))?;
        let (_, cert) = x509_parser::parse_x509_certificate(leaf)
            .map_err(|e| format!("parsing certificate: {e}"))?;
        cert.subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .map(str::to_owned)
            .ok_or_else(|| "certificate without a common name".to_owned())
    }
}

/// What a request presents: a bearer token (from its header) and the client certificates of
/// its connection.
pub(crate) struct Presented<'a> {
    pub bearer: Option<&'a str>,
    pub certificates: Option<&'a [CertificateDer<'static>]>,
}

/// kube-apiserver's union of authenticators, in its order: the client certificate, then the
/// bearer token; the first that succeeds names the user.
pub(crate) fn authenticate(
    tokens: &Tokens,
    client_ca: Option<&ClientCa>,
    presented: Presented<'_>,
) -> Result<String, ()> {
    if let (Some(chain), Some(ca)) = (presented.certificates, client_ca)
        && let Ok(user) = ca.user(chain)
    {
        return Ok(user);
    }
    if let Some(token) = presented.bearer {
        return tokens.user(token.trim()).ok_or(());
    }
    match presented.certificates {
        Some(chain) if !chain.is_empty() => Err(()),
        _ => Ok("system:anonymous".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::TestCa;
    use std::time::Duration;

    #[test]
    fn tokens_expire_and_can_be_revoked() {
        let tokens = Tokens::default();
        tokens.add("a", "alice", None);
        tokens.add("b", "bob", Some(SystemTime::now() - Duration::from_secs(1)));
        tokens.add(
            "c",
            "carol",
            Some(SystemTime::now() + Duration::from_secs(60)),
        );
        assert_eq!(tokens.user("a").as_deref(), Some("alice"));
        assert_eq!(tokens.user("b"), None);
        assert_eq!(tokens.user("c").as_deref(), Some("carol"));
        tokens.revoke("a");
        assert_eq!(tokens.user("a"), None);
    }

    fn ca_trusting(ca: &TestCa) -> ClientCa {
        let client_ca = ClientCa::new(crate::tls::provider());
        client_ca.set(&ca.pem()).expect("client CA");
        client_ca
    }

    #[test]
    fn a_certificate_names_its_common_name_while_valid() {
        let ca = TestCa::new("clients");
        let client_ca = ca_trusting(&ca);
        let valid = ca.client("system:node:n1", Duration::from_secs(60));
        assert_eq!(
            client_ca.user(&valid.chain()),
            Ok("system:node:n1".to_owned())
        );
        let expired = ca.client_valid_between(
            "system:node:n1",
            SystemTime::now() - Duration::from_secs(120),
            SystemTime::now() - Duration::from_secs(60),
        );
        let refused = client_ca.user(&expired.chain()).expect_err("expired");
        assert!(refused.contains("expired"), "{refused}");
        let other = TestCa::new("other").client("system:node:n1", Duration::from_secs(60));
        assert!(client_ca.user(&other.chain()).is_err());
    }

    #[test]
    fn the_union_takes_the_first_valid_credential() {
        let ca = TestCa::new("clients");
        let client_ca = ca_trusting(&ca);
        let tokens = Tokens::default();
        tokens.add("t", "token-user", None);
        let expired = ca
            .client_valid_between(
                "cert-user",
                SystemTime::now() - Duration::from_secs(120),
                SystemTime::now() - Duration::from_secs(60),
            )
            .chain();
        let valid = ca.client("cert-user", Duration::from_secs(60)).chain();
        let auth = |bearer, certificates| {
            authenticate(
                &tokens,
                Some(&client_ca),
                Presented {
                    bearer,
                    certificates,
                },
            )
        };
        assert_eq!(auth(None, None), Ok("system:anonymous".into()));
        assert_eq!(auth(Some("t"), Some(&valid)), Ok("cert-user".into()));
        assert_eq!(auth(Some("t"), Some(&expired)), Ok("token-user".into()));
        assert_eq!(auth(None, Some(&expired)), Err(()));
        assert_eq!(auth(Some("nope"), None), Err(()));
    }
}
