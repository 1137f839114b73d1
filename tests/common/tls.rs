//! Test certificate authorities for the API's HTTPS, and a rustls client that trusts one.

use std::{path::Path, sync::Arc};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};
use tokio_rustls::{
    TlsConnector,
    rustls::{self, RootCertStore, pki_types::ServerName},
};

/// A certificate authority of the test's own.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            format!("mutantops test CA {name}"),
        );
        let key = KeyPair::generate().unwrap();
        TestCa {
            issuer: CertifiedIssuer::self_signed(params, key).unwrap(),
        }
    }

    /// The CA certificate, PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server certificate for 127.0.0.1 and localhost: (chain PEM, key PEM).
    pub fn server(&self) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// Writes a server certificate and key into `dir` (replacing them by a rename, as a
    /// Secret volume does); returns their paths.
    pub fn write_server(&self, dir: &Path) -> (String, String) {
        self.write_pair(dir, self.server())
    }

    fn write_pair(&self, dir: &Path, (cert, key): (String, String)) -> (String, String) {
        let (cert_path, key_path) = (dir.join("tls.crt"), dir.join("tls.key"));
        for (path, text) in [(&key_path, key), (&cert_path, cert)] {
            let staged = path.with_extension("new");
            std::fs::write(&staged, text).unwrap();
            std::fs::rename(&staged, path).unwrap();
        }
        (
            cert_path.display().to_string(),
            key_path.display().to_string(),
        )
    }

    /// A rustls client that trusts only this CA.
    pub fn client(&self) -> TlsConnector {
        let mut roots = RootCertStore::empty();
        roots.add(self.issuer.der().clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        TlsConnector::from(Arc::new(config))
    }
}

/// A rustls client that trusts only the CA certificates in `ca_pem`; TLS 1.2 only if
/// `tls12_only`.
pub fn client_trusting(ca_pem: &str, tls12_only: bool) -> TlsConnector {
    use rustls::pki_types::{CertificateDer, pem::PemObject as _};
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider);
    let builder = if tls12_only {
        builder.with_protocol_versions(&[&rustls::version::TLS12])
    } else {
        builder.with_safe_default_protocol_versions()
    };
    let config = builder
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

/// Sends raw bytes over TLS to 127.0.0.1:`port` and returns all that comes back until the
/// server closes, or the TLS error.
pub async fn exchange(connector: &TlsConnector, port: u16, raw: &[u8]) -> Result<String, String> {
    let tcp = TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    tls.write_all(raw).await.map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    // A close without close_notify still ends the answer.
    let _ = tls.read_to_end(&mut out).await;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// An API request over TLS (`Connection: close`), parsed; the TLS error otherwise.
pub async fn request(
    connector: &TlsConnector,
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> Result<super::http::Reply, String> {
    let raw = super::http::Request::new(method, path, token, body).bytes(port);
    let text = exchange(connector, port, &raw).await?;
    super::http::parse(&text).ok_or_else(|| format!("not an HTTP response: {text:?}"))
}
