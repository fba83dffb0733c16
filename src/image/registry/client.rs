//! The registry client: resolves references to verified manifests and streams blobs into ingests.

use std::sync::Arc;

use futures::StreamExt;

use crate::config::registry::RegistryConfig;
use crate::error::{Error, ErrorKind, Result};
use crate::image::content::{Ingest, MAX_SMALL_BLOB};
use crate::image::digest::Digest;
use crate::image::manifest::{media_type_of, Descriptor};
use crate::image::reference::Reference;
use crate::image::registry::auth::Credentials;
use crate::image::registry::hosts::{self, Endpoint};
use crate::image::registry::transport::{describe, read_limited, Transport};

/// The manifest media types bosun asks for, best first.
const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, \
    application/vnd.oci.image.index.v1+json, \
    application/vnd.docker.distribution.manifest.v2+json, \
    application/vnd.docker.distribution.manifest.list.v2+json";

/// A reference resolved to verified manifest bytes.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The endpoint that served it; fetch the rest of the image from there.
    pub endpoint: Endpoint,
    /// sha256 of `bytes` (equal to the reference's digest when it had one).
    pub digest: Digest,
    /// Manifest or index media type (from the registry, else from the document itself).
    pub media_type: String,
    /// The manifest or index exactly as served.
    pub bytes: Vec<u8>,
}

/// A client for OCI distribution registries. Cheap to clone; clones share connections and tokens.
#[derive(Clone)]
pub struct RegistryClient {
    config: Arc<RegistryConfig>,
    transport: Arc<Transport>,
}

impl RegistryClient {
    /// A client for `config`; refuses bad mirror URLs and unreadable CA files.
    pub fn new(config: &RegistryConfig) -> Result<Self> {
        let transport = Transport::new(config)?;
        Ok(RegistryClient {
            config: Arc::new(config.clone()),
            transport: Arc::new(transport),
        })
    }

    /// The endpoints tried for `r`, mirrors first.
    pub fn endpoints(&self, r: &Reference) -> Result<Vec<Endpoint>> {
        hosts::endpoints(&self.config, r.domain())
    }

    /// Fetches the manifest or index `r` names (its digest when it has one, else its tag) from
    /// the first endpoint that has it, and verifies the bytes against the digest.
    pub async fn resolve(&self, r: &Reference, creds: &Credentials) -> Result<Resolved> {
        let endpoints = self.endpoints(r)?;
        let mut last: Option<Error> = None;
        let mut all_not_found = true;
        for ep in endpoints {
            match self.resolve_at(&ep, r, creds).await {
                Ok(res) => return Ok(res),
                Err(e) => {
                    tracing::debug!(endpoint = %ep, reference = %r, error = %e, "resolve failed");
                    all_not_found &= e.kind() == ErrorKind::NotFound;
                    last = Some(e);
                }
            }
        }
        match last {
            Some(e) if all_not_found => Err(Error::not_found(format!(
                "image {:?}: manifest not found: {e}",
                r.to_string()
            ))),
            Some(e) => Err(e.context(format!("image {:?}", r.to_string()))),
            None => Err(Error::internal(format!(
                "image {:?}: no endpoints",
                r.to_string()
            ))),
        }
    }

    async fn resolve_at(
        &self,
        ep: &Endpoint,
        r: &Reference,
        creds: &Credentials,
    ) -> Result<Resolved> {
        let by = match (r.digest(), r.tag()) {
            (Some(d), _) => d.to_string(),
            (None, Some(t)) => t.to_string(),
            (None, None) => return Err(Error::invalid(format!("image {r}: no tag or digest"))),
        };
        let rest = format!("{}/manifests/{by}", r.repository());
        let resp = self
            .transport
            .get(ep, r.repository(), &rest, Some(MANIFEST_ACCEPT), creds)
            .await?;
        let header_type = header(&resp, "content-type");
        let header_digest = header(&resp, "docker-content-digest");
        let bytes = read_limited(resp, MAX_SMALL_BLOB)
            .await
            .map_err(|e| e.context(format!("{ep}: {rest}")))?;
        let digest = Digest::of(&bytes);
        if let Some(want) = r.digest() {
            if *want != digest {
                return Err(Error::invalid(format!(
                    "image {:?}: {ep} served a manifest hashing to {digest}, not the requested digest",
                    r.to_string()
                )));
            }
        } else if let Some(said) = header_digest
            .as_deref()
            .filter(|d| d.starts_with("sha256:"))
        {
            if said != digest.as_str() {
                return Err(Error::invalid(format!(
                    "image {:?}: {ep} says the manifest is {said} but it hashes to {digest}",
                    r.to_string()
                )));
            }
        }
        let media_type = media_type_of(header_type.as_deref().unwrap_or_default(), &bytes);
        Ok(Resolved {
            endpoint: ep.clone(),
            digest,
            media_type,
            bytes,
        })
    }

    /// Fetches the child manifest `desc` of an index from `ep`, verified against its digest and size.
    pub async fn fetch_manifest(
        &self,
        ep: &Endpoint,
        r: &Reference,
        creds: &Credentials,
        desc: &Descriptor,
    ) -> Result<Vec<u8>> {
        let what = format!("image {:?}: manifest {}", r.to_string(), desc.digest);
        if desc.size > MAX_SMALL_BLOB {
            return Err(Error::new(
                ErrorKind::ResourceExhausted,
                format!("{what}: {} bytes is more than {MAX_SMALL_BLOB}", desc.size),
            ));
        }
        let rest = format!("{}/manifests/{}", r.repository(), desc.digest);
        let resp = self
            .transport
            .get(ep, r.repository(), &rest, Some(MANIFEST_ACCEPT), creds)
            .await
            .map_err(|e| e.context(&what))?;
        let bytes = read_limited(resp, desc.size)
            .await
            .map_err(|e| e.context(&what))?;
        let got = Digest::of(&bytes);
        if got != desc.digest || bytes.len() as u64 != desc.size {
            return Err(Error::invalid(format!(
                "{what}: {ep} served {} bytes hashing to {got}, expected {} bytes",
                bytes.len(),
                desc.size
            )));
        }
        Ok(bytes)
    }

    /// Streams blob `desc` of `r` from `ep` into `ingest`, calling `on_progress` with the bytes
    /// written so far. The caller commits the ingest, which verifies digest and size.
    pub async fn fetch_blob(
        &self,
        ep: &Endpoint,
        r: &Reference,
        creds: &Credentials,
        desc: &Descriptor,
        ingest: &mut Ingest,
        mut on_progress: impl FnMut(u64),
    ) -> Result<()> {
        let what = format!("blob {}", desc.digest);
        let rest = format!("{}/blobs/{}", r.repository(), desc.digest);
        let resp = self
            .transport
            .get(ep, r.repository(), &rest, None, creds)
            .await
            .map_err(|e| e.context(&what))?;
        if let Some(len) = resp.content_length().filter(|n| *n != desc.size) {
            return Err(Error::invalid(format!(
                "{what}: {ep} sends {len} bytes, the descriptor says {}",
                desc.size
            )));
        }
        let mut stream = resp.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                let kind = if e.is_timeout() {
                    ErrorKind::DeadlineExceeded
                } else {
                    ErrorKind::Unavailable
                };
                Error::new(kind, format!("{what}: {ep}: read: {}", describe(&e)))
            })?;
            // Small synchronous writes into the page cache; the fsync happens at commit.
            ingest.write(&chunk)?;
            on_progress(ingest.written());
        }
        Ok(())
    }
}

fn header(resp: &reqwest::Response, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.trim().to_string())
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
