//! HTTP plumbing for registry GETs: clients per TLS setting, auth retry, HTTP fallback, errors.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Instant;

use futures::StreamExt;
use reqwest::header::{ACCEPT, AUTHORIZATION, RANGE, WWW_AUTHENTICATE};
use reqwest::{Response, StatusCode};

use crate::config::registry::RegistryConfig;
use crate::error::{Error, ErrorKind, Result};
use crate::image::registry::auth::{self, Credentials, TokenCache};
use crate::image::registry::challenge;
use crate::image::registry::clients::ClientPool;
use crate::image::registry::hosts::{self, Endpoint, Scheme};
use crate::image::registry::retry::{self, Retries};

/// How much of an error body is read for its message.
const MAX_ERROR_BODY: u64 = 64 << 10;

/// Why one attempt failed: connect failures may fall back to plain HTTP, others may not.
enum Failure {
    Connect(String),
    Other(Error),
}

/// One GET of the distribution API.
pub(crate) struct Get<'a> {
    /// The endpoint asked.
    pub ep: &'a Endpoint,
    /// The repository (the token scope).
    pub repo: &'a str,
    /// The path below `/v2/`.
    pub rest: &'a str,
    /// The `Accept` header, if any.
    pub accept: Option<&'a str>,
    /// Asks for the bytes from this offset on (`Range: bytes=N-`) when not 0.
    pub from: u64,
}

/// Shared HTTP state of a [`super::RegistryClient`].
pub(crate) struct Transport {
    /// Per endpoint settings and whether proxies are bypassed (loopback hosts).
    clients: ClientPool,
    tokens: TokenCache,
    /// Loopback hosts found to speak plain HTTP, so later requests skip the TLS attempt.
    plain_hosts: Mutex<HashSet<String>>,
}

impl Transport {
    /// HTTP state for `config`; clients are built as endpoints need them.
    pub(crate) fn new(config: &RegistryConfig) -> Result<Self> {
        config.check()?;
        Ok(Transport {
            clients: ClientPool::new(config),
            tokens: TokenCache::default(),
            plain_hosts: Mutex::default(),
        })
    }

    /// GETs `/v2/<rest>` on `ep` for repository `repo`; only 2xx answers come back as `Ok`.
    /// Transient answers (429, 5xx) and failures after connecting are tried again as `retries`
    /// allows, honouring `Retry-After`; connect failures are not (the next endpoint is tried).
    pub(crate) async fn get(
        &self,
        g: &Get<'_>,
        creds: &Credentials,
        retries: &mut Retries<'_>,
    ) -> Result<Response> {
        let ep = g.ep;
        // The kubelet picked these credentials for the image's registry: a mirror (a pull-through
        // cache with its own upstream credentials) is asked anonymously, and when it refuses,
        // the origin is next in line anyway.
        let anonymous = Credentials::default();
        let creds = if ep.mirror { &anonymous } else { creds };
        let loopback = hosts::is_loopback(&ep.host);
        let client = &self
            .clients
            .get(&ep.client, loopback)
            .map_err(|e| e.context(format!("{ep}")))?;
        let known_plain = self.plain_hosts.lock().is_ok_and(|s| s.contains(&ep.host));
        let plain_first = match ep.scheme {
            Scheme::Http => true,
            Scheme::Https => false,
            Scheme::HttpsThenHttp => known_plain,
        };
        let first = self.attempt(client, g, plain_first, creds, retries).await;
        let result = match first {
            Err(Failure::Connect(tls_err))
                if ep.scheme == Scheme::HttpsThenHttp && !plain_first =>
            {
                // docker/containerd: a loopback registry without TLS is spoken to in plain HTTP.
                match self.attempt(client, g, true, creds, retries).await {
                    Ok(resp) => {
                        if let Ok(mut s) = self.plain_hosts.lock() {
                            s.insert(ep.host.clone());
                        }
                        Ok(resp)
                    }
                    Err(Failure::Connect(e)) if e == tls_err => Err(Failure::Connect(e)),
                    Err(Failure::Connect(e)) => {
                        Err(Failure::Connect(format!("https: {tls_err}; http: {e}")))
                    }
                    // A TLS server answers plain HTTP with 400: the TLS error is the real story.
                    Err(Failure::Other(e)) if e.kind() == ErrorKind::InvalidArgument => {
                        Err(Failure::Connect(format!("https: {tls_err}; http: {e}")))
                    }
                    Err(other) => Err(other),
                }
            }
            other => other,
        };
        result.map_err(|f| match f {
            Failure::Connect(why) => Error::unavailable(format!("{ep}: connect: {why}")),
            Failure::Other(e) => e,
        })
    }

    /// One scheme: answers a 401 challenge once and retries transient failures.
    async fn attempt(
        &self,
        client: &reqwest::Client,
        g: &Get<'_>,
        plain: bool,
        creds: &Credentials,
        retries: &mut Retries<'_>,
    ) -> std::result::Result<Response, Failure> {
        let (ep, repo, rest) = (g.ep, g.repo, g.rest);
        let url = ep.url(plain, rest);
        let scope = auth::pull_scope(repo);
        let mut authorization = self
            .tokens
            .get(&ep.host, &scope, creds)
            .or_else(|| auth::preset(creds));
        let mut challenged = false;
        loop {
            let mut req = client.get(&url);
            if let Some(a) = g.accept {
                req = req.header(ACCEPT, a);
            }
            if let Some(v) = &authorization {
                req = req.header(AUTHORIZATION, v);
            }
            if g.from > 0 {
                req = req.header(RANGE, format!("bytes={}-", g.from));
            }
            let resp = match req.send().await {
                Ok(resp) => resp,
                Err(e) => match classify(ep, rest, &e) {
                    Failure::Other(err) => {
                        // Connected, then reset or timed out: the next attempt may get through.
                        tracing::debug!(endpoint = %ep, rest, error = %err, "request failed, retrying");
                        retries
                            .pause(None)
                            .await
                            .map_err(|why| Failure::Other(why.explain(err)))?;
                        continue;
                    }
                    connect => return Err(connect),
                },
            };
            let status = resp.status();
            if status == StatusCode::UNAUTHORIZED && !challenged {
                challenged = true;
                self.tokens.forget(&ep.host, &scope, creds);
                let challenges: Vec<_> = resp
                    .headers()
                    .get_all(WWW_AUTHENTICATE)
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .flat_map(challenge::parse)
                    .collect();
                let (value, ttl) = auth::authorize(client, &ep.host, repo, &challenges, creds)
                    .await
                    .map_err(Failure::Other)?;
                if authorization.as_ref() == Some(&value) {
                    // Nothing new to offer: the registry refused exactly these credentials.
                    return Err(Failure::Other(status_error(ep, repo, rest, resp).await));
                }
                self.tokens.put(&ep.host, &scope, creds, &value, ttl);
                authorization = Some(value);
                continue;
            }
            if retry::is_transient(status) {
                let asked = retry::retry_after(resp.headers());
                match retries.next_delay(asked, Instant::now()) {
                    Ok(pause) => {
                        tracing::debug!(endpoint = %ep, %status, rest, ?pause, "registry busy, retrying");
                        drop(resp);
                        tokio::time::sleep(pause).await;
                        continue;
                    }
                    Err(why) => {
                        let e = status_error(ep, repo, rest, resp).await;
                        return Err(Failure::Other(why.explain(e)));
                    }
                }
            }
            if status.is_success() {
                return Ok(resp);
            }
            if status == StatusCode::UNAUTHORIZED {
                self.tokens.forget(&ep.host, &scope, creds);
            }
            return Err(Failure::Other(status_error(ep, repo, rest, resp).await));
        }
    }
}

fn classify(ep: &Endpoint, rest: &str, e: &reqwest::Error) -> Failure {
    if e.is_connect() {
        return Failure::Connect(describe(e));
    }
    if e.is_timeout() {
        return Failure::Other(Error::new(
            ErrorKind::DeadlineExceeded,
            format!("{ep}: GET {rest}: timed out waiting for the registry"),
        ));
    }
    Failure::Other(Error::unavailable(format!(
        "{ep}: GET {rest}: {}",
        describe(e)
    )))
}

/// The root cause of an HTTP error in a few words (`connection refused`, `dns: …`).
pub(crate) fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut chain = vec![e];
    while let Some(next) = chain.last().and_then(|e| e.source()) {
        chain.push(next);
    }
    let dns = chain.iter().any(|e| e.to_string().starts_with("dns error"));
    let io = chain
        .iter()
        .rev()
        .find_map(|e| e.downcast_ref::<std::io::Error>());
    let why = match io.map(|e| (e.kind(), e)) {
        Some((std::io::ErrorKind::ConnectionRefused, _)) => "connection refused".to_string(),
        Some((std::io::ErrorKind::ConnectionReset, _)) => "connection reset by peer".to_string(),
        Some((std::io::ErrorKind::TimedOut, _)) => "timed out".to_string(),
        Some((_, e)) => e.to_string(),
        None if chain.iter().any(|e| e.to_string() == "operation timed out") => {
            "timed out".to_string()
        }
        None => chain.last().map(|e| e.to_string()).unwrap_or_default(),
    };
    if dns {
        format!("dns: {why}")
    } else {
        why
    }
}

/// Reads a whole body, refusing more than `limit` bytes.
pub(crate) async fn read_limited(resp: Response, limit: u64) -> Result<Vec<u8>> {
    if resp.content_length().is_some_and(|n| n > limit) {
        return Err(too_large(limit));
    }
    let mut out = Vec::new();
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| Error::unavailable(format!("read body: {}", describe(&e))))?;
        if (out.len() + chunk.len()) as u64 > limit {
            return Err(too_large(limit));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

fn too_large(limit: u64) -> Error {
    Error::new(
        ErrorKind::ResourceExhausted,
        format!("response larger than {limit} bytes"),
    )
}

/// Maps a non-2xx answer to an error, with the registry's own error messages when it sent some.
async fn status_error(ep: &Endpoint, repo: &str, rest: &str, resp: Response) -> Error {
    let status = resp.status();
    let body = read_limited(resp, MAX_ERROR_BODY).await.unwrap_or_default();
    let detail = registry_messages(&body)
        .map(|m| format!(" ({m})"))
        .unwrap_or_default();
    match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Error::new(
            ErrorKind::PermissionDenied,
            format!(
                "{ep}: repository {repo}: {status}: pull access denied, the repository does not \
                 exist or needs authorization{detail}"
            ),
        ),
        StatusCode::NOT_FOUND => Error::not_found(format!("{ep}: {rest}: not found{detail}")),
        s if s == StatusCode::TOO_MANY_REQUESTS || s.is_server_error() || s.is_redirection() => {
            Error::unavailable(format!("{ep}: GET {rest}: {status}{detail}"))
        }
        _ => Error::invalid(format!("{ep}: GET {rest}: {status}{detail}")),
    }
}

/// `CODE: message` pairs from a distribution error body (`{"errors":[{"code","message"}]}`).
fn registry_messages(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Body {
        errors: Vec<Item>,
    }
    #[derive(serde::Deserialize)]
    struct Item {
        #[serde(default)]
        code: String,
        #[serde(default)]
        message: String,
    }
    let b: Body = serde_json::from_slice(body).ok()?;
    let parts: Vec<String> = b
        .errors
        .iter()
        .map(|i| format!("{}: {}", i.code, i.message))
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_error_bodies_are_summarised() {
        let body =
            br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown","detail":{}}]}"#;
        assert_eq!(
            registry_messages(body).as_deref(),
            Some("MANIFEST_UNKNOWN: manifest unknown")
        );
        assert_eq!(registry_messages(b"<html>"), None);
        assert_eq!(registry_messages(br#"{"errors":[]}"#), None);
    }

    #[test]
    fn describe_names_the_root_cause() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(describe(&io), "connection refused");
        let other = std::io::Error::other("boom");
        assert_eq!(describe(&other), "boom");
    }
}
