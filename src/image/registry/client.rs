//! The registry client: resolves references to verified manifests and streams blobs into ingests.

use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use reqwest::header::HeaderMap;
use reqwest::StatusCode;

use crate::config::registry::RegistryConfig;
use crate::error::{Error, ErrorKind, Result};
use crate::image::content::{Ingest, MAX_SMALL_BLOB};
use crate::image::digest::Digest;
use crate::image::manifest::{media_type_of, Descriptor};
use crate::image::reference::Reference;
use crate::image::registry::auth::Credentials;
use crate::image::registry::hosts::{Endpoint, Hosts, PullHosts};
use crate::image::registry::retry::{Retries, RetryPolicy};
use crate::image::registry::transport::{describe, read_limited, Get, Transport};

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

/// How one blob download attempt ended badly.
enum Attempt {
    /// Worth another attempt (resuming from what was stored).
    Again(Error),
    /// Final: another attempt would fare no better.
    Final(Error),
}

/// A client for OCI distribution registries. Cheap to clone; clones share connections and tokens.
#[derive(Clone)]
pub struct RegistryClient {
    hosts: Arc<Hosts>,
    transport: Arc<Transport>,
    policy: Arc<RetryPolicy>,
}

impl RegistryClient {
    /// A client for `config`; refuses bad mirror URLs.
    pub fn new(config: &RegistryConfig) -> Result<Self> {
        let transport = Transport::new(config)?;
        Ok(RegistryClient {
            hosts: Arc::new(Hosts::new(config)),
            transport: Arc::new(transport),
            policy: Arc::new(RetryPolicy::default()),
        })
    }

    /// The same client retrying by `policy` (tests use short pauses).
    #[cfg(test)]
    pub(crate) fn with_policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = Arc::new(policy);
        self
    }

    /// GETs a manifest whole (at most `limit` bytes): its headers and body. A body that breaks
    /// off is asked for again, as the retry policy allows.
    async fn get_manifest(
        &self,
        ep: &Endpoint,
        r: &Reference,
        rest: &str,
        creds: &Credentials,
        limit: u64,
    ) -> Result<(HeaderMap, Vec<u8>)> {
        let g = Get {
            ep,
            repo: r.repository(),
            rest,
            accept: Some(MANIFEST_ACCEPT),
            from: 0,
        };
        let mut retries = Retries::new(&self.policy);
        loop {
            let resp = self.transport.get(&g, creds, &mut retries).await?;
            let headers = resp.headers().clone();
            match read_limited(resp, limit)
                .await
                .map_err(|e| e.context(format!("{ep}: {rest}")))
            {
                Ok(bytes) => return Ok((headers, bytes)),
                Err(e) if e.kind() == ErrorKind::Unavailable => {
                    tracing::debug!(endpoint = %ep, rest, error = %e, "manifest body broke off, retrying");
                    retries.pause(None).await.map_err(|why| why.explain(e))?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// This client with one pull's registry settings on top (`ctr images pull` flags);
    /// connections and tokens are shared.
    pub fn for_pull(&self, pull: PullHosts) -> RegistryClient {
        RegistryClient {
            hosts: Arc::new(self.hosts.for_pull(pull)),
            transport: self.transport.clone(),
            policy: self.policy.clone(),
        }
    }

    /// What decides the endpoints.
    pub fn hosts(&self) -> &Hosts {
        &self.hosts
    }

    /// The endpoints tried for `r`, mirrors first.
    pub fn endpoints(&self, r: &Reference) -> Result<Vec<Endpoint>> {
        self.hosts.endpoints(r.domain(), r.digest().is_some())
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
        let (headers, bytes) = self
            .get_manifest(ep, r, &rest, creds, MAX_SMALL_BLOB)
            .await?;
        let header_type = header(&headers, "content-type");
        let header_digest = header(&headers, "docker-content-digest");
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
        let (_, bytes) = self
            .get_manifest(ep, r, &rest, creds, desc.size)
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

    /// Streams blob `desc` of `r` from `ep` into `ingest`, after the bytes it holds already
    /// (`Range: bytes=N-`), calling `on_progress` with the bytes written so far. Resets, short
    /// bodies and transient answers are retried as the policy allows, each attempt resuming
    /// where the last one stopped. A registry that ignores the range (200) is read from byte
    /// 0; one that answers another range than asked (206 with a `Content-Range` not starting
    /// at N) is asked again for the whole blob. The caller verifies and commits the ingest:
    /// bytes the registry lied about fail the digest check there.
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
        let mut retries = Retries::new(&self.policy);
        loop {
            let from = ingest.written();
            if from == desc.size {
                return Ok(());
            }
            let g = Get {
                ep,
                repo: r.repository(),
                rest: &rest,
                accept: None,
                from,
            };
            let err = match self
                .blob_attempt(&g, creds, desc, ingest, &mut retries, &mut on_progress)
                .await
            {
                Ok(()) => return Ok(()),
                Err(Attempt::Final(e)) => return Err(e.context(&what)),
                Err(Attempt::Again(e)) => e.context(&what),
            };
            if ingest.written() > from {
                retries.progress(Instant::now());
            }
            tracing::debug!(endpoint = %ep, error = %err, stored = ingest.written(), "blob download broke off, resuming");
            retries.pause(None).await.map_err(|why| why.explain(err))?;
        }
    }

    /// One GET `g` of blob `desc`, from the bytes `ingest` holds (`g.from`).
    async fn blob_attempt(
        &self,
        g: &Get<'_>,
        creds: &Credentials,
        desc: &Descriptor,
        ingest: &mut Ingest,
        retries: &mut Retries<'_>,
        on_progress: &mut impl FnMut(u64),
    ) -> std::result::Result<(), Attempt> {
        let (ep, from) = (g.ep, g.from);
        let resp = self
            .transport
            .get(g, creds, retries)
            .await
            .map_err(Attempt::Final)?;
        let start = if resp.status() == StatusCode::PARTIAL_CONTENT {
            let range = header(resp.headers(), "content-range");
            match range.as_deref().and_then(content_range) {
                Some((s, end, total))
                    if s == from
                        && end.checked_add(1) == Some(desc.size)
                        && total.is_none_or(|t| t == desc.size) =>
                {
                    from
                }
                _ => {
                    // Not the bytes asked for: start over rather than trust this answer.
                    ingest.restart().map_err(Attempt::Final)?;
                    return Err(Attempt::Again(Error::unavailable(format!(
                        "{ep}: asked for bytes {from}-, got Content-Range {range:?}"
                    ))));
                }
            }
        } else {
            if from > 0 {
                tracing::debug!(endpoint = %ep, digest = %desc.digest, "registry ignores Range, reading from byte 0");
                ingest.restart().map_err(Attempt::Final)?;
            }
            0
        };
        let want = desc.size - start;
        if let Some(len) = resp.content_length().filter(|n| *n != want) {
            let from = if start > 0 {
                format!(" from byte {start}")
            } else {
                String::new()
            };
            return Err(Attempt::Final(Error::invalid(format!(
                "{ep} sends {len} bytes{from}, the descriptor says {}",
                desc.size
            ))));
        }
        let mut stream = resp.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                let kind = if e.is_timeout() {
                    ErrorKind::DeadlineExceeded
                } else {
                    ErrorKind::Unavailable
                };
                Attempt::Again(Error::new(kind, format!("{ep}: read: {}", describe(&e))))
            })?;
            // Small synchronous writes into the page cache; the fsync happens at commit.
            ingest.write(&chunk).map_err(Attempt::Final)?;
            on_progress(ingest.written());
        }
        if ingest.written() < desc.size {
            return Err(Attempt::Again(Error::unavailable(format!(
                "{ep}: the body ended after {} of {} bytes",
                ingest.written(),
                desc.size
            ))));
        }
        Ok(())
    }
}

/// `(first, last, total)` of a `Content-Range: bytes first-last/total` header (total `*`:
/// `None`).
fn content_range(v: &str) -> Option<(u64, u64, Option<u64>)> {
    let (range, total) = v.trim().strip_prefix("bytes ")?.split_once('/')?;
    let (first, last) = range.split_once('-')?;
    let (first, last) = (first.trim().parse().ok()?, last.trim().parse().ok()?);
    let total = match total.trim() {
        "*" => None,
        t => Some(t.parse().ok()?),
    };
    (first <= last).then_some((first, last, total))
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.trim().to_string())
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
