//! HTTPS for a listener: rustls with ring (already in the binary for the client), a
//! certificate chain and key from PEM files, read again when either file changes so that a
//! rotated certificate (a cert-manager or k3s Secret mounted as a volume) is served without a
//! restart.
//!
//! The files are looked at on a handshake at most once a second ([`CHECK_EVERY`]): their
//! modification time, size and inode (a Secret volume swaps a symlink, so the inode changes).
//! A pair that cannot be loaded then (the key written before the certificate, say) keeps the
//! one served before, with a warning, and is tried again on the next check.

use std::{
    fs::Metadata,
    os::unix::fs::MetadataExt as _,
    path::Path,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant, SystemTime},
};

use rustls::{
    ServerConfig,
    crypto::CryptoProvider,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _},
    server::{ClientHello, ResolvesServerCert},
    sign::CertifiedKey,
};

use crate::{Error, Result, config::TlsFiles};

/// How often a handshake looks at the files for a change, at most.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// The most plaintext one TLS record carries: 4 KiB, which mbedTLS builds for small boards
/// accept (`MBEDTLS_SSL_IN_CONTENT_LEN` 4096) as well as every other client.
pub const MAX_RECORD_PLAINTEXT: usize = 4096;

/// The rustls server configuration of a listener serving the certificate in `files` (HTTP/1.1
/// only, TLS 1.2 and 1.3, records of at most [`MAX_RECORD_PLAINTEXT`]). A pair that cannot be
/// read, parsed or matched is an error naming the file.
pub fn server_config(files: &TlsFiles) -> Result<Arc<ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let resolver = Reloading::new(files.clone(), Arc::clone(&provider), CHECK_EVERY)?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        // ring supports both versions: a failure here is a defect of the build.
        .map_err(|_| Error::Internal("the ring provider offers no TLS version rustls deems safe"))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    // mbedTLS on small boards fails on records larger than its input buffer, which firmware
    // often sets to 4 KiB (R38).
    config.max_fragment_size = Some(MAX_RECORD_PLAINTEXT);
    Ok(Arc::new(config))
}

/// What identifies one version of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

impl From<&Metadata> for Stamp {
    fn from(meta: &Metadata) -> Self {
        Stamp {
            modified: meta.modified().ok(),
            len: meta.len(),
            inode: meta.ino(),
        }
    }
}

/// The stamps of both files, or `None` when either cannot be looked at.
fn stamps(files: &TlsFiles) -> Option<(Stamp, Stamp)> {
    let cert = std::fs::metadata(&files.cert).ok()?;
    let key = std::fs::metadata(&files.key).ok()?;
    Some(((&cert).into(), (&key).into()))
}

/// Serves the certificate of the files now.
#[derive(Debug)]
struct Reloading {
    files: TlsFiles,
    provider: Arc<CryptoProvider>,
    check_every: Duration,
    current: Mutex<Current>,
}

#[derive(Debug)]
struct Current {
    key: Arc<CertifiedKey>,
    /// The versions of the files `key` was loaded from, or last failed to load from.
    seen: Option<(Stamp, Stamp)>,
    checked: Instant,
}

impl Reloading {
    fn new(files: TlsFiles, provider: Arc<CryptoProvider>, check_every: Duration) -> Result<Self> {
        let seen = stamps(&files);
        let key = load(&files, &provider)?;
        Ok(Reloading {
            files,
            provider,
            check_every,
            current: Mutex::new(Current {
                key,
                seen,
                checked: Instant::now(),
            }),
        })
    }

    /// The certificate to serve: the one loaded, or a newer one when the files changed.
    fn current(&self) -> Arc<CertifiedKey> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current.checked.elapsed() >= self.check_every {
            current.checked = Instant::now();
            let now = stamps(&self.files);
            if now.is_some() && now != current.seen {
                current.seen = now;
                match load(&self.files, &self.provider) {
                    Ok(key) => {
                        current.key = key;
                        tracing::info!(
                            cert = %self.files.cert.display(),
                            "serving the API's new TLS certificate"
                        );
                    }
                    Err(e) => tracing::warn!("{e}; serving the certificate loaded before"),
                }
            }
        }
        Arc::clone(&current.key)
    }
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The settings of the two files, which an error names.
const CERT: &str = "MUTANT_API_TLS_CERT_FILE";
const KEY: &str = "MUTANT_API_TLS_KEY_FILE";

/// The file `path` of `setting` cannot be used, because of `why`.
fn unusable(setting: &'static str, path: &Path, why: &dyn std::fmt::Display) -> Error {
    Error::config(setting, format!("{}: {why}", path.display()))
}

/// Reads and checks the pair: a chain of at least one certificate, a private key of a kind
/// ring signs with, and the key matching the first certificate. A failure is the setting of
/// the file at fault, with the file's path.
fn load(files: &TlsFiles, provider: &CryptoProvider) -> Result<Arc<CertifiedKey>> {
    let pem = std::fs::read(&files.cert).map_err(|e| unusable(CERT, &files.cert, &e))?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| unusable(CERT, &files.cert, &e))?;
    if chain.is_empty() {
        return Err(unusable(CERT, &files.cert, &"no PEM CERTIFICATE block"));
    }
    let pem = std::fs::read(&files.key).map_err(|e| unusable(KEY, &files.key, &e))?;
    let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| unusable(KEY, &files.key, &e))?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| unusable(KEY, &files.key, &e))?;
    let certified = CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        // ring cannot tell for every kind of key: then the handshake is the test.
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(e) => {
            return Err(Error::config(
                KEY,
                format!(
                    "{} is not the key of the certificate in {CERT} {}: {e}",
                    files.key.display(),
                    files.cert.display()
                ),
            ));
        }
    }
    Ok(Arc::new(certified))
}

#[cfg(test)]
mod tests {
    use rcgen::{CertificateParams, KeyPair};

    use super::*;

    /// A self-signed certificate for `name` and its key, PEM.
    fn pair(name: &str) -> (String, String) {
        let key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let cert = CertificateParams::new(vec![name.to_string()])
            .and_then(|p| p.self_signed(&key))
            .unwrap_or_else(|e| panic!("{e}"));
        (cert.pem(), key.serialize_pem())
    }

    fn files(dir: &Path, cert: &str, key: &str) -> TlsFiles {
        let files = TlsFiles {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        };
        // replaced by a rename, as a Secret volume does
        for (path, text) in [(&files.cert, cert), (&files.key, key)] {
            let staged = path.with_extension("new");
            std::fs::write(&staged, text).unwrap_or_else(|e| panic!("{e}"));
            std::fs::rename(&staged, path).unwrap_or_else(|e| panic!("{e}"));
        }
        files
    }

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("mutantops-tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        dir
    }

    fn error(files: &TlsFiles) -> String {
        match server_config(files) {
            Ok(_) => panic!("accepted {files:?}"),
            Err(e) => e.to_string(),
        }
    }

    // R47: a bad pair is a start-up error that names the file at fault.
    #[test]
    fn a_bad_pair_names_the_file() {
        let dir = temp_dir("bad");
        let (cert, key) = pair("a.example");
        let (_, other_key) = pair("b.example");
        assert!(server_config(&files(&dir, &cert, &key)).is_ok());

        let e = error(&files(&dir, &cert, &other_key));
        assert!(
            e.contains("MUTANT_API_TLS_KEY_FILE")
                && e.contains("is not the key of the certificate"),
            "{e}"
        );
        let e = error(&files(&dir, "not PEM", &key));
        assert!(
            e.contains("MUTANT_API_TLS_CERT_FILE") && e.contains("no PEM CERTIFICATE"),
            "{e}"
        );
        let e = error(&files(&dir, &cert, &cert));
        assert!(e.contains("MUTANT_API_TLS_KEY_FILE"), "{e}");
        let missing = TlsFiles {
            cert: dir.join("absent.crt"),
            key: dir.join("tls.key"),
        };
        let e = error(&missing);
        assert!(e.contains("absent.crt"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    // R47: new files are served from the next check on; a broken pair keeps the old one.
    #[test]
    fn changed_files_are_served_after_the_next_check() {
        let dir = temp_dir("reload");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (cert_a, key_a) = pair("a.example");
        let first = files(&dir, &cert_a, &key_a);
        let reloading = Reloading::new(first.clone(), Arc::clone(&provider), Duration::ZERO)
            .unwrap_or_else(|e| panic!("{e}"));
        let served = |r: &Reloading| r.current().cert[0].clone();
        let a = served(&reloading);

        // a key that does not match: still a
        let (cert_b, key_b) = pair("b.example");
        files(&dir, &cert_b, &key_a);
        assert_eq!(served(&reloading), a);
        // the pair complete: b
        files(&dir, &cert_b, &key_b);
        let b = served(&reloading);
        assert_ne!(b, a);
        assert_eq!(b.as_ref(), pem_der(&cert_b).as_slice());
        // gone files keep what is served
        std::fs::remove_file(&first.cert).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(served(&reloading), b);

        // with the interval, a change waits for the next check
        let slow = Reloading::new(
            files(&dir, &cert_a, &key_a),
            provider,
            Duration::from_secs(3600),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        files(&dir, &cert_b, &key_b);
        assert_eq!(served(&slow), a);
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn pem_der(pem: &str) -> Vec<u8> {
        CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap_or_else(|e| panic!("{e}"))
            .to_vec()
    }
}
