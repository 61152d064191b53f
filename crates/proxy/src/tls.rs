//! TLS on both sides of an inspected tunnel: certificates for the requested host signed by the
//! sandbox's own CA (which the sandbox trusts through a bundle the supervisor writes), and
//! upstream connections verified against the host's trust store.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::{BoxFuture, FutureExt, Shared};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, ConfigBuilder, RootCertStore, ServerConfig, WantsVerifier};
use time::{Duration, OffsetDateTime};

/// Host certificates kept per CA; past this, the cache starts over.
const MAX_CACHED_HOSTS: usize = 1024;
/// How long host certificates are valid (they are made again for every proxy start).
const LEAF_VALIDITY: Duration = Duration::days(7);
const CA_VALIDITY: Duration = Duration::days(365);

pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A per-sandbox certificate authority. Its key never leaves this value; its certificate
/// ([`SandboxCa::cert_pem`]) goes into the sandbox's trust bundle.
#[derive(Clone)]
pub struct SandboxCa {
    inner: Arc<CaInner>,
}

struct CaInner {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    leaf_key: KeyPair,
    hosts: Mutex<HashMap<String, Arc<ServerConfig>>>,
}

impl SandboxCa {
    /// A fresh CA named `name` (the supervisor names every sandbox's `OpenShell sandbox CA`).
    pub fn generate(name: &str) -> Result<SandboxCa, rcgen::Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let now = OffsetDateTime::now_utc();
        params.not_before = now - Duration::hours(1);
        params.not_after = now + CA_VALIDITY;
        let cert = params.self_signed(&key)?;
        let inner = CaInner {
            cert_pem: cert.pem(),
            cert_der: cert.der().clone(),
            issuer: Issuer::new(params, key),
            leaf_key: KeyPair::generate()?,
            hosts: Mutex::new(HashMap::new()),
        };
        Ok(SandboxCa { inner: Arc::new(inner) })
    }

    /// The CA certificate, PEM, to write into the sandbox as a trust bundle.
    pub fn cert_pem(&self) -> &str {
        &self.inner.cert_pem
    }

    /// The CA certificate, DER.
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.inner.cert_der
    }

    /// The TLS server side for `host` (a DNS name or IP literal), made once and cached.
    pub(crate) fn server_config(&self, host: &str) -> Result<Arc<ServerConfig>, String> {
        let mut hosts = self.inner.hosts.lock().map_err(|_| "certificate cache poisoned".to_string())?;
        if let Some(cfg) = hosts.get(host) {
            return Ok(cfg.clone());
        }
        let cfg = Arc::new(self.make_server_config(host).map_err(|e| format!("certificate for {host}: {e}"))?);
        if hosts.len() >= MAX_CACHED_HOSTS {
            hosts.clear();
        }
        hosts.insert(host.to_string(), cfg.clone());
        Ok(cfg)
    }

    fn make_server_config(&self, host: &str) -> Result<ServerConfig, Box<dyn std::error::Error>> {
        // A string that parses as an IP address becomes an IP SAN.
        let mut params = CertificateParams::new(vec![host.to_string()])?;
        params.distinguished_name.push(DnType::CommonName, host);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let now = OffsetDateTime::now_utc();
        params.not_before = now - Duration::hours(1);
        params.not_after = now + LEAF_VALIDITY;
        let cert = params.signed_by(&self.inner.leaf_key, &self.inner.issuer)?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.inner.leaf_key.serialize_der()));
        let mut cfg = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)?;
        // Inside a tunnel the proxy speaks HTTP/1.1 only.
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(cfg)
    }
}

/// The CAs upstream servers are verified against: given, or still loading. Parsing the
/// host's store takes milliseconds of CPU, so a sandbox can start serving before it is read:
/// only an upstream TLS handshake waits for it.
#[derive(Clone)]
pub struct UpstreamRoots(Shared<BoxFuture<'static, Result<Arc<RootCertStore>, String>>>);

impl UpstreamRoots {
    pub fn ready(roots: RootCertStore) -> UpstreamRoots {
        UpstreamRoots::loading(std::future::ready(Ok(roots)))
    }

    /// Roots that `load` yields; a failure fails every upstream TLS handshake with its reason.
    pub fn loading(load: impl Future<Output = Result<RootCertStore, String>> + Send + 'static) -> UpstreamRoots {
        UpstreamRoots(load.map(|r| r.map(Arc::new)).boxed().shared())
    }
}

/// The TLS client side for upstream connections, trusting its roots only: the protocol
/// versions are checked when the proxy is made, the roots are taken at the first handshake.
pub(crate) struct Upstream {
    builder: ConfigBuilder<ClientConfig, WantsVerifier>,
    roots: UpstreamRoots,
    config: tokio::sync::OnceCell<Arc<ClientConfig>>,
}

impl Upstream {
    pub(crate) fn new(roots: UpstreamRoots) -> Result<Upstream, rustls::Error> {
        let builder = ClientConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
        Ok(Upstream { builder, roots, config: tokio::sync::OnceCell::new() })
    }

    pub(crate) async fn config(&self) -> Result<Arc<ClientConfig>, String> {
        let roots = self.roots.0.clone().await.map_err(|e| format!("the host's trust store: {e}"))?;
        let config = self.config.get_or_init(|| async {
            let mut cfg = self.builder.clone().with_root_certificates(roots).with_no_client_auth();
            cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
            Arc::new(cfg)
        });
        Ok(config.await.clone())
    }
}

/// The host's trust store (the system bundle); certificates that do not parse are skipped
/// and counted in the log.
pub fn host_roots() -> RootCertStore {
    let found = rustls_native_certs::load_native_certs();
    for e in &found.errors {
        tracing::warn!(error = %e, "reading the host's trust store");
    }
    let mut roots = RootCertStore::empty();
    let (added, skipped) = roots.add_parsable_certificates(found.certs);
    if skipped > 0 {
        tracing::warn!(added, skipped, "some host CA certificates did not parse");
    }
    roots
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_configs_are_cached_and_pem_is_a_certificate() {
        let ca = SandboxCa::generate("test").unwrap();
        assert!(ca.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        let a = ca.server_config("api.example.com").unwrap();
        let b = ca.server_config("api.example.com").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(ca.server_config("198.18.0.2").is_ok());
    }
}
