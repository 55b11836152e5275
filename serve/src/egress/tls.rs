//! TLS for `https://` endpoints (the `tls` feature, on by default): rustls 0.21 with ring,
//! the newest line that builds with Rust 1.63 on Linux and on x86_64-pc-windows-gnu.
//! Servers are checked against Mozilla's roots (webpki-roots: the same on every platform,
//! no OS store consulted) plus the PEM certificates of [`Trust`] (a private CA, an
//! S3-compatible server's own certificate). Without the feature an `https://` endpoint is
//! [`EgressError::TlsNotBuiltIn`].

use super::EgressError;

/// Which server certificates an `https://` endpoint may present besides the public roots.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trust {
    /// PEM certificates (`-----BEGIN CERTIFICATE-----` blocks) trusted as roots too.
    pub extra_roots_pem: String,
}

/// The DER bodies of the `CERTIFICATE` blocks of `pem`.
pub fn pem_certificates(pem: &str) -> Result<Vec<Vec<u8>>, EgressError> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let mut out = Vec::new();
    let mut rest = pem;
    while let Some(start) = rest.find(BEGIN) {
        let body = &rest[start + BEGIN.len()..];
        let end = body
            .find(END)
            .ok_or_else(|| EgressError::Options("a PEM certificate has no END line".into()))?;
        let b64: String = body[..end].split_whitespace().collect();
        let der = super::crypto::base64_decode(&b64)
            .ok_or_else(|| EgressError::Options("a PEM certificate is not base64".into()))?;
        out.push(der);
        rest = &body[end + END.len()..];
    }
    if out.is_empty() && !pem.trim().is_empty() {
        return Err(EgressError::Options(
            "the trusted certificates hold no PEM CERTIFICATE block".into(),
        ));
    }
    Ok(out)
}

#[cfg(feature = "tls")]
pub(crate) use with_tls::Connector;

#[cfg(feature = "tls")]
mod with_tls {
    use std::sync::Arc;

    use tokio::net::TcpStream;
    use tokio_rustls::client::TlsStream;
    use tokio_rustls::rustls::{
        Certificate, ClientConfig, OwnedTrustAnchor, RootCertStore, ServerName,
    };
    use tokio_rustls::TlsConnector;

    use super::{pem_certificates, Trust};
    use crate::egress::EgressError;

    /// Makes TLS connections to one service's endpoints.
    #[derive(Clone)]
    pub(crate) struct Connector {
        config: Arc<ClientConfig>,
    }

    impl std::fmt::Debug for Connector {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Connector(rustls)")
        }
    }

    impl Connector {
        /// A connector trusting Mozilla's roots and `trust`'s certificates.
        pub(crate) fn new(trust: &Trust) -> Result<Connector, EgressError> {
            let mut roots = RootCertStore::empty();
            roots.add_trust_anchors(webpki_roots::TLS_SERVER_ROOTS.iter().map(|ta| {
                OwnedTrustAnchor::from_subject_spki_name_constraints(
                    ta.subject,
                    ta.spki,
                    ta.name_constraints,
                )
            }));
            for der in pem_certificates(&trust.extra_roots_pem)? {
                roots.add(&Certificate(der)).map_err(|e| {
                    EgressError::Options(format!("a trusted certificate is not usable: {}", e))
                })?;
            }
            let config = ClientConfig::builder()
                .with_safe_defaults()
                .with_root_certificates(roots)
                .with_no_client_auth();
            Ok(Connector {
                config: Arc::new(config),
            })
        }

        /// The TLS handshake with `host` over `tcp`.
        pub(crate) async fn handshake(
            &self,
            host: &str,
            tcp: TcpStream,
        ) -> Result<TlsStream<TcpStream>, EgressError> {
            let name = ServerName::try_from(host).map_err(|_| {
                EgressError::Options(format!("{:?} is no valid TLS server name", host))
            })?;
            TlsConnector::from(self.config.clone())
                .connect(name, tcp)
                .await
                .map_err(|e| EgressError::Tls {
                    host: host.to_string(),
                    message: e.to_string(),
                })
        }
    }
}

/// Without TLS: nothing to connect with (an `https://` URL never parses).
#[cfg(not(feature = "tls"))]
#[derive(Clone, Debug)]
pub(crate) struct Connector;

#[cfg(not(feature = "tls"))]
impl Connector {
    pub(crate) fn new(trust: &Trust) -> Result<Connector, EgressError> {
        pem_certificates(&trust.extra_roots_pem)?;
        Ok(Connector)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_blocks_are_decoded_and_garbage_refused() {
        let pem = "junk\n-----BEGIN CERTIFICATE-----\nZm9v\nYmFy\n-----END CERTIFICATE-----\n\
                   -----BEGIN CERTIFICATE-----\nYQ==\n-----END CERTIFICATE-----\n";
        assert_eq!(
            pem_certificates(pem).unwrap(),
            vec![b"foobar".to_vec(), b"a".to_vec()]
        );
        assert!(pem_certificates("").unwrap().is_empty());
        assert!(pem_certificates("not a pem").is_err());
        assert!(pem_certificates("-----BEGIN CERTIFICATE-----\nZm9v\n").is_err());
        assert!(Connector::new(&Trust {
            extra_roots_pem: "-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----".into()
        })
        .is_err());
    }
}
