//! Authentication as kube-apiserver does it: bearer tokens (which can expire, as bound
//! service-account tokens and exec-plugin tokens do) and TLS client certificates, checked
//! against the client CA at the time of each request (an expired certificate gets 401, not a
//! failed handshake, because kube-apiserver only requests a certificate during the handshake
//! and verifies it in its x509 authenticator). A request that presents credentials none of
//! which is valid is 401; one that presents none is `system:anonymous`.
//!
//! Users have groups as in kube-apiserver (checked upstream in
//! `staging/src/k8s.io/apiserver/pkg/authentication/`): a client certificate's subject
//! Organization (O) fields are its groups (`request/x509/x509.go`, `CommonNameUserConversion`);
//! a token's groups are what [`Tokens::add_with_groups`] gave it. Every authenticated user but
//! `system:anonymous` also gets `system:authenticated`, unless its groups already hold it or
//! `system:unauthenticated` (`group/authenticated_group_adder.go`); an anonymous request is
//! `system:anonymous` in the group `system:unauthenticated` (`request/anonymous/anonymous.go`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;

/// An authenticated user: its name and groups, as admission policies see them in
/// `request.userInfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserInfo {
    pub username: String,
    pub groups: Vec<String>,
}

/// The group of every authenticated user.
pub const ALL_AUTHENTICATED: &str = "system:authenticated";
/// The group of `system:anonymous`.
pub const ALL_UNAUTHENTICATED: &str = "system:unauthenticated";
/// The user of a request without credentials.
pub const ANONYMOUS: &str = "system:anonymous";

impl UserInfo {
    fn new(username: &str, groups: Vec<String>) -> UserInfo {
        UserInfo {
            username: username.to_owned(),
            groups,
        }
    }

    fn anonymous() -> UserInfo {
        UserInfo::new(ANONYMOUS, vec![ALL_UNAUTHENTICATED.to_owned()])
    }

    /// What kube-apiserver's authenticated-group adder does to an authenticated user.
    fn with_authenticated_group(mut self) -> UserInfo {
        let marked = self
            .groups
            .iter()
            .any(|g| g == ALL_AUTHENTICATED || g == ALL_UNAUTHENTICATED);
        if self.username != ANONYMOUS && !marked {
            self.groups.push(ALL_AUTHENTICATED.to_owned());
        }
        self
    }
}

/// Bearer tokens the server accepts: token to user (and groups), with an optional expiry. Shared with the
/// running server: tests add, expire and revoke tokens while clients use them.
#[derive(Debug, Default)]
pub struct Tokens(Mutex<HashMap<String, Token>>);

#[derive(Debug, Clone)]
struct Token {
    user: String,
    groups: Vec<String>,
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

    /// Accept `token` as `user` (in no group but `system:authenticated`) until `expires`
    /// (for ever with `None`).
    pub fn add(&self, token: &str, user: &str, expires: Option<SystemTime>) {
        self.add_with_groups(token, user, &[], expires);
    }

    /// Accept `token` as `user` in `groups` (and `system:authenticated`) until `expires`, as
    /// a static token file's line `token,user,uid,"group1,group2"` would.
    pub fn add_with_groups(
        &self,
        token: &str,
        user: &str,
        groups: &[&str],
        expires: Option<SystemTime>,
    ) {
        let token_entry = Token {
            user: user.to_owned(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            expires,
        };
        self.lock().insert(token.to_owned(), token_entry);
    }

    /// Stop accepting `token`.
    pub fn revoke(&self, token: &str) {
        self.lock().remove(token);
    }

    /// The user of a token that is known and not expired.
    #[cfg(test)]
    pub(crate) fn user(&self, token: &str) -> Option<String> {
        self.identity(token).map(|u| u.username)
    }

    /// The user and groups (as given, without `system:authenticated`) of a token that is
    /// known and not expired.
    pub(crate) fn identity(&self, token: &str) -> Option<UserInfo> {
        let tokens = self.lock();
        let entry = tokens.get(token)?;
        let valid = entry.expires.is_none_or(|at| SystemTime::now() < at);
        valid.then(|| UserInfo::new(&entry.user, entry.groups.clone()))
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
    #[cfg(test)]
    pub(crate) fn user(&self, chain: &[CertificateDer<'static>]) -> Result<String, String> {
        self.identity(chain).map(|u| u.username)
    }

    /// As [`ClientCa::user`], with the subject's organizations as the groups.
    pub(crate) fn identity(&self, chain: &[CertificateDer<'static>]) -> Result<UserInfo, String> {
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
        let name = cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .filter(|cn| !cn.is_empty())
            .ok_or_else(|| "certificate without a common name".to_owned())?;
        let groups = cert
            .subject()
            .iter_organization()
            .filter_map(|o| o.as_str().ok())
            .map(str::to_owned)
            .collect();
        Ok(UserInfo::new(name, groups))
    }
}

/// What a request presents: a bearer token (from its header) and the client certificates of
/// its connection.
pub(crate) struct Presented<'a> {
    pub bearer: Option<&'a str>,
    pub certificates: Option<&'a [CertificateDer<'static>]>,
}

/// kube-apiserver's union of authenticators, in its order: the client certificate, then the
/// bearer token; the first that succeeds names the user, who is then in
/// `system:authenticated` too.
pub(crate) fn authenticate(
    tokens: &Tokens,
    client_ca: Option<&ClientCa>,
    presented: Presented<'_>,
) -> Result<UserInfo, ()> {
    if let (Some(chain), Some(ca)) = (presented.certificates, client_ca)
        && let Ok(user) = ca.identity(chain)
    {
        return Ok(user.with_authenticated_group());
    }
    if let Some(token) = presented.bearer {
        return tokens
            .identity(token.trim())
            .map(UserInfo::with_authenticated_group)
            .ok_or(());
    }
    match presented.certificates {
        Some(chain) if !chain.is_empty() => Err(()),
        _ => Ok(UserInfo::anonymous()),
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
        let name = |r: Result<UserInfo, ()>| r.map(|u| u.username);
        assert_eq!(name(auth(None, None)), Ok("system:anonymous".into()));
        assert_eq!(name(auth(Some("t"), Some(&valid))), Ok("cert-user".into()));
        assert_eq!(
            name(auth(Some("t"), Some(&expired))),
            Ok("token-user".into())
        );
        assert_eq!(auth(None, Some(&expired)), Err(()));
        assert_eq!(auth(Some("nope"), None), Err(()));
    }

    #[test]
    fn users_have_groups_and_authenticated_users_are_in_system_authenticated() {
        let ca = TestCa::new("clients");
        let client_ca = ca_trusting(&ca);
        let tokens = Tokens::default();
        tokens.add_with_groups("agent", "inplaced:node:n1", &["inplaced:agents"], None);
        tokens.add("plain", "alice", None);
        tokens.add_with_groups("marked", "bob", &["system:authenticated"], None);
        let node = ca
            .client_in_group("system:node:n1", "system:nodes", Duration::from_secs(60))
            .chain();
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
        let user = |name: &str, groups: &[&str]| {
            Ok(UserInfo::new(
                name,
                groups.iter().map(|g| (*g).to_owned()).collect(),
            ))
        };
        assert_eq!(
            auth(Some("agent"), None),
            user(
                "inplaced:node:n1",
                &["inplaced:agents", "system:authenticated"]
            )
        );
        assert_eq!(
            auth(Some("plain"), None),
            user("alice", &["system:authenticated"])
        );
        assert_eq!(
            auth(Some("marked"), None),
            user("bob", &["system:authenticated"]),
            "not added twice"
        );
        assert_eq!(
            auth(None, Some(&node)),
            user("system:node:n1", &["system:nodes", "system:authenticated"])
        );
        assert_eq!(
            auth(None, None),
            user("system:anonymous", &["system:unauthenticated"])
        );
        // The name alone, as before.
        assert_eq!(tokens.user("agent").as_deref(), Some("inplaced:node:n1"));
    }
}
