//! TLS to the API server: rustls with ring, the cluster's CA (read again as it rotates) or the
//! system's roots, and the client certificate of a kubeconfig.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use base64::Engine as _;
use hyper_rustls::ConfigBuilderExt as _;
use kube::config::AuthInfo;
use rustls::{
    ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
    client::{
        WebPkiServerVerifier,
        danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    },
    pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime, pem::PemObject as _},
};
use secrecy::ExposeSecret as _;

/// rustls with ring: the cluster's CA (or the system's roots when none is configured) and the
/// client certificate, if any.
pub(super) fn tls_config(
    config: &kube::Config,
    refresh: Duration,
) -> std::result::Result<ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match (&config.root_cert_file, &config.root_cert) {
        // In a cluster: the CA file of the ServiceAccount volume, which changes when the
        // cluster's CA is rotated.
        (Some(path), _) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ReloadingVerifier::new(
                path.clone(),
                refresh,
            )?)),
        (None, Some(ders)) => {
            let mut roots = RootCertStore::empty();
            for der in ders {
                roots
                    .add(CertificateDer::from(der.clone()))
                    .map_err(|e| format!("certificate-authority: {e}"))?;
            }
            builder.with_root_certificates(roots)
        }
        (None, None) => builder
            .with_native_roots()
            .map_err(|e| format!("no certificate-authority, and the system's roots: {e}"))?,
    };
    match client_identity(&config.auth_info)? {
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| format!("client certificate and key: {e}")),
        None => Ok(builder.with_no_client_auth()),
    }
}

/// Verifies the server against the CA certificates in a file, read again once `refresh` has
/// passed, so that new connections trust a rotated CA without a restart. Connections already
/// open are not affected. A failed read keeps the CA read before and is tried again after the
/// next `refresh`.
#[derive(Debug)]
pub(crate) struct ReloadingVerifier {
    path: PathBuf,
    refresh: Duration,
    current: Mutex<(Arc<WebPkiServerVerifier>, Instant)>,
}

impl ReloadingVerifier {
    /// Reads the file once; a file that cannot be read or holds no certificate is an error here.
    pub(crate) fn new(path: PathBuf, refresh: Duration) -> std::result::Result<Self, String> {
        let verifier = Self::load(&path)?;
        Ok(Self {
            path,
            refresh,
            current: Mutex::new((verifier, Instant::now())),
        })
    }

    fn load(path: &Path) -> std::result::Result<Arc<WebPkiServerVerifier>, String> {
        let what = || format!("certificate-authority {}", path.display());
        let pem = std::fs::read(path).map_err(|e| format!("{}: {e}", what()))?;
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| format!("{}: {e}", what()))?;
            roots.add(cert).map_err(|e| format!("{}: {e}", what()))?;
        }
        if roots.is_empty() {
            return Err(format!("{}: no PEM CERTIFICATE block", what()));
        }
        WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .map_err(|e| format!("{}: {e}", what()))
    }

    /// The verifier for the CA in the file now.
    pub(crate) fn current(&self) -> Arc<WebPkiServerVerifier> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current.1.elapsed() >= self.refresh {
            match Self::load(&self.path) {
                Ok(verifier) => current.0 = verifier,
                Err(e) => tracing::warn!("{e}; keeping the CA read before"),
            }
            current.1 = Instant::now();
        }
        current.0.clone()
    }
}

impl ServerCertVerifier for ReloadingVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        self.current().verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.current().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.current().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.current().supported_verify_schemes()
    }
}

type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

/// The client certificate chain and key of a kubeconfig user, from `*-data` (base64) or files.
pub(crate) fn client_identity(user: &AuthInfo) -> std::result::Result<Option<Identity>, String> {
    let cert = load_pem(
        "client-certificate",
        user.client_certificate_data.as_deref(),
        user.client_certificate.as_deref(),
    )?;
    let key = load_pem(
        "client-key",
        user.client_key_data.as_ref().map(|k| k.expose_secret()),
        user.client_key.as_deref(),
    )?;
    let (cert, key) = match (cert, key) {
        (None, None) => return Ok(None),
        (Some(_), None) => return Err("client-certificate without client-key".to_owned()),
        (None, Some(_)) => return Err("client-key without client-certificate".to_owned()),
        (Some(cert), Some(key)) => (cert, key),
    };
    let chain = CertificateDer::pem_slice_iter(&cert)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| format!("client-certificate: {e}"))?;
    if chain.is_empty() {
        return Err("client-certificate: no PEM CERTIFICATE block".to_owned());
    }
    let key = PrivateKeyDer::from_pem_slice(&key).map_err(|e| format!("client-key: {e}"))?;
    Ok(Some((chain, key)))
}

/// PEM bytes from base64 `data` or, when there is none, from `file`.
fn load_pem(
    what: &str,
    data: Option<&str>,
    file: Option<&str>,
) -> std::result::Result<Option<Vec<u8>>, String> {
    if let Some(data) = data {
        return base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map(Some)
            .map_err(|e| format!("{what}-data is not base64: {e}"));
    }
    match file {
        Some(path) => std::fs::read(path)
            .map(Some)
            .map_err(|e| format!("{what} {path}: {e}")),
        None => Ok(None),
    }
}
