//! HTTPS as kube-apiserver serves it: a serving certificate that can be replaced while the
//! server runs (new connections get the new one), and client certificates requested but not
//! required during the handshake (Go's `tls.RequestClientCert`), to be verified per request by
//! [`crate::auth`]. [`TestCa`] issues the certificates tests need, with validities of seconds.

use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// The crypto provider of the server and of [`TestCa`]'s checks: ring, which kube-rs's rustls
/// already builds.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates in a PEM text.
pub(crate) fn certificates(pem: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certificates = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("reading PEM certificates: {e}"))?;
    if certificates.is_empty() {
        return Err("no certificate in PEM text".into());
    }
    Ok(certificates)
}

/// A certificate and its private key, PEM-encoded, as they are written to files.
#[derive(Debug, Clone)]
pub struct Credential {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Credential {
    /// The certificate chain (the leaf alone), DER.
    pub fn chain(&self) -> Vec<CertificateDer<'static>> {
        certificates(&self.cert_pem).unwrap_or_default()
    }
}

/// A certificate authority for tests: issues serving certificates for 127.0.0.1 and client
/// certificates whose common name is the user, valid for as short a time as a test needs.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl TestCa {
    /// A new self-signed CA named `name`, valid for a day.
    ///
    /// # Panics
    /// If the key or certificate cannot be generated (a broken crypto provider).
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = (SystemTime::now() - Duration::from_secs(60)).into();
        params.not_after = (SystemTime::now() + Duration::from_secs(86_400)).into();
        let key = KeyPair::generate().expect("CA key");
        let issuer = CertifiedIssuer::self_signed(params, key).expect("CA certificate");
        TestCa { issuer }
    }

    /// The CA certificate, PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A serving certificate for 127.0.0.1 and localhost, valid from a minute ago for
    /// `valid_for`.
    pub fn serving(&self, valid_for: Duration) -> Credential {
        let mut params = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
            .expect("serving certificate names");
        params
            .distinguished_name
            .push(DnType::CommonName, "apiserver-double");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(
            params,
            SystemTime::now() - Duration::from_secs(60),
            SystemTime::now() + valid_for,
        )
    }

    /// A client certificate for `user`, valid from a minute ago for `valid_for`.
    pub fn client(&self, user: &str, valid_for: Duration) -> Credential {
        self.client_valid_between(
            user,
            SystemTime::now() - Duration::from_secs(60),
            SystemTime::now() + valid_for,
        )
    }

    /// A client certificate for `user`, valid from `not_before` to `not_after`.
    pub fn client_valid_between(
        &self,
        user: &str,
        not_before: SystemTime,
        not_after: SystemTime,
    ) -> Credential {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, user);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(params, not_before, not_after)
    }

    /// A client certificate for `user` in the group `group` (the subject's organization, as
    /// kubelet certificates are `O=system:nodes`), valid from a minute ago for `valid_for`.
    /// One group only: rcgen keeps one value per subject attribute type.
    pub fn client_in_group(&self, user: &str, group: &str, valid_for: Duration) -> Credential {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, user);
        params
            .distinguished_name
            .push(DnType::OrganizationName, group);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(
            params,
            SystemTime::now() - Duration::from_secs(60),
            SystemTime::now() + valid_for,
        )
    }

    fn issue(
        &self,
        mut params: CertificateParams,
        not_before: SystemTime,
        not_after: SystemTime,
    ) -> Credential {
        params.not_before = not_before.into();
        params.not_after = not_after.into();
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("certificate");
        Credential {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

/// The server side of TLS: the current server configuration, replaced whole when the serving
/// certificate changes.
pub struct ServingTls {
    provider: Arc<CryptoProvider>,
    config: RwLock<Arc<rustls::ServerConfig>>,
}

impl ServingTls {
    pub(crate) fn new(provider: Arc<CryptoProvider>, serving: &Credential) -> Result<Self, String> {
        let config = server_config(&provider, serving)?;
        Ok(ServingTls {
            provider,
            config: RwLock::new(config),
        })
    }

    /// Serve `serving` on new connections from now on (open connections keep theirs).
    pub fn set_serving(&self, serving: &Credential) -> Result<(), String> {
        let config = server_config(&self.provider, serving)?;
        *self
            .config
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = config;
        Ok(())
    }

    pub(crate) fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let config = self
            .config
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        tokio_rustls::TlsAcceptor::from(config)
    }
}

fn server_config(
    provider: &Arc<CryptoProvider>,
    serving: &Credential,
) -> Result<Arc<rustls::ServerConfig>, String> {
    let chain = certificates(&serving.cert_pem)?;
    let key = PrivateKeyDer::from_pem_slice(serving.key_pem.as_bytes())
        .map_err(|e| format!("reading the serving key: {e}"))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(Arc::new(RequestClientCert(provider.clone())))
        .with_single_cert(chain, key)
        .map_err(|e| format!("serving certificate: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Asks for a client certificate and checks the handshake's proof of its key, but leaves
/// trusting it to the authenticator, as Go's `tls.RequestClientCert` does for kube-apiserver.
#[derive(Debug)]
struct RequestClientCert(Arc<CryptoProvider>);

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
