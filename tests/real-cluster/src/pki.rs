//! The cluster's certificates: one CA that signs the apiserver's serving certificate and every
//! client certificate (kubelets, agents, kruise-manager's client) and that the
//! controller-manager's CSR signer uses; and the service-account signing key.

use std::time::{Duration, SystemTime};

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};

/// A certificate and its private key, PEM, as they are written to files.
#[derive(Debug, Clone)]
pub struct Credential {
    pub cert_pem: String,
    pub key_pem: String,
}

pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// Long enough for any test run; a test of expiry issues its own short ones.
const VALIDITY: Duration = Duration::from_secs(2 * 86_400);

impl Ca {
    pub fn new(name: &str) -> anyhow::Result<Ca> {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = (SystemTime::now() - Duration::from_secs(3600)).into();
        params.not_after = (SystemTime::now() + VALIDITY).into();
        let key = KeyPair::generate().context("CA key")?;
        let issuer = CertifiedIssuer::self_signed(params, key).context("CA certificate")?;
        Ok(Ca { issuer })
    }

    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    /// The CA's private key (the controller-manager signs CSRs with it).
    pub fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// A serving certificate for the given DNS names and IP addresses.
    pub fn serving(&self, name: &str, dns: &[&str], ips: &[&str]) -> anyhow::Result<Credential> {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        for host in dns {
            params
                .subject_alt_names
                .push(SanType::DnsName((*host).try_into().context("DNS name")?));
        }
        for ip in ips {
            params
                .subject_alt_names
                .push(SanType::IpAddress(ip.parse().context("IP address")?));
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(params, VALIDITY)
    }

    /// A client certificate: user `user` (CN), groups `groups` (O; rcgen keeps one value per
    /// attribute type, so at most one group).
    pub fn client(&self, user: &str, group: Option<&str>) -> anyhow::Result<Credential> {
        self.client_valid_for(user, group, VALIDITY)
    }

    /// As [`Ca::client`], valid from an hour ago for `valid_for` from now.
    pub fn client_valid_for(
        &self,
        user: &str,
        group: Option<&str>,
        valid_for: Duration,
    ) -> anyhow::Result<Credential> {
        self.issue(client_params(user, group), valid_for)
    }

    /// As [`Ca::client_valid_for`], but valid from now: its whole life is `valid_for`, which is
    /// what a kubelet's certificate manager reckons its rotation from (70–90 % of the life).
    pub fn client_from_now(
        &self,
        user: &str,
        group: Option<&str>,
        valid_for: Duration,
    ) -> anyhow::Result<Credential> {
        self.issue_between(client_params(user, group), SystemTime::now(), valid_for)
    }

    fn issue(&self, params: CertificateParams, valid_for: Duration) -> anyhow::Result<Credential> {
        // An hour back: clocks of the machine's processes never disagree that much.
        self.issue_between(
            params,
            SystemTime::now() - Duration::from_secs(3600),
            valid_for,
        )
    }

    fn issue_between(
        &self,
        mut params: CertificateParams,
        not_before: SystemTime,
        valid_for: Duration,
    ) -> anyhow::Result<Credential> {
        params.not_before = not_before.into();
        params.not_after = (SystemTime::now() + valid_for).into();
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let key = KeyPair::generate().context("key")?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .context("certificate")?;
        Ok(Credential {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A client certificate's subject: user `user` (CN), group `group` (O).
fn client_params(user: &str, group: Option<&str>) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, user);
    if let Some(group) = group {
        params
            .distinguished_name
            .push(DnType::OrganizationName, group);
    }
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params
}

/// A new key pair, PEM: the private key (PKCS#8) and its public key (SubjectPublicKeyInfo), the
/// service-account token signing key and the key tokens are verified with.
pub fn signing_key_pem() -> anyhow::Result<(String, String)> {
    let key = KeyPair::generate().context("signing key")?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_certificate_is_signed_by_the_ca_and_names_its_user() {
        let ca = Ca::new("test").unwrap();
        let client = ca.client("system:node:n1", Some("system:nodes")).unwrap();
        assert!(client.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(client.key_pem.contains("PRIVATE KEY"));
        assert_ne!(client.cert_pem, ca.cert_pem());
        assert!(ca.key_pem().contains("PRIVATE KEY"));
    }
}
