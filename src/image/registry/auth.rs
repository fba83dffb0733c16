//! Registry credentials (CRI AuthConfig) and the Basic / Bearer token exchange, with a token cache.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use crate::error::{Error, ErrorKind, Result};
use crate::image::registry::challenge::Challenge;
use crate::image::registry::transport::{describe, read_limited};

/// The OAuth2 client id sent with refresh-token requests.
const CLIENT_ID: &str = "bosun";
/// Token lifetime when the token server states none (distribution token spec).
const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(60);
/// Basic credentials are re-sent preemptively for this long after a host asked for them.
const BASIC_TTL: Duration = Duration::from_secs(3600);
/// Token responses are small JSON documents.
const MAX_TOKEN_RESPONSE: u64 = 1 << 20;

/// Credentials from a CRI `AuthConfig` (all optional; empty means anonymous).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    /// User name.
    pub username: String,
    /// Password.
    pub password: String,
    /// base64 `user:password`, used when `username` is empty.
    pub auth: String,
    /// OAuth2 refresh token, exchanged at the token realm.
    pub identity_token: String,
    /// A bearer token sent to the registry as is.
    pub registry_token: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = |s: &str| if s.is_empty() { "" } else { "<redacted>" };
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &set(&self.password))
            .field("auth", &set(&self.auth))
            .field("identity_token", &set(&self.identity_token))
            .field("registry_token", &set(&self.registry_token))
            .finish()
    }
}

impl Credentials {
    /// Whether nothing is set (anonymous pulls).
    pub fn is_anonymous(&self) -> bool {
        self.username.is_empty()
            && self.auth.is_empty()
            && self.identity_token.is_empty()
            && self.registry_token.is_empty()
    }

    /// `(user, password)` from the explicit fields or the base64 `auth` field.
    pub fn user_password(&self) -> Option<(String, String)> {
        if !self.username.is_empty() {
            return Some((self.username.clone(), self.password.clone()));
        }
        let raw = B64.decode(self.auth.trim()).ok()?;
        let text = String::from_utf8(raw).ok()?;
        let (u, p) = text.split_once(':')?;
        Some((u.to_string(), p.to_string()))
    }

    /// A stable identity of the secrets, so cached tokens never cross credentials.
    fn fingerprint(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        for s in [
            &self.username,
            &self.password,
            &self.auth,
            &self.identity_token,
        ] {
            h.update((s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
        }
        h.update(self.registry_token.as_bytes());
        h.finalize().into()
    }
}

type Key = (String, String, [u8; 32]);

/// `Authorization` header values per (host, scope, credentials), until they expire.
#[derive(Default)]
pub(crate) struct TokenCache {
    map: Mutex<HashMap<Key, (String, Instant)>>,
}

impl TokenCache {
    /// A still-valid header value.
    pub(crate) fn get(&self, host: &str, scope: &str, creds: &Credentials) -> Option<String> {
        let key = (host.to_string(), scope.to_string(), creds.fingerprint());
        let mut map = self.map.lock().ok()?;
        match map.get(&key) {
            Some((v, until)) if *until > Instant::now() => Some(v.clone()),
            Some(_) => {
                map.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Remembers `value` for `ttl`.
    pub(crate) fn put(
        &self,
        host: &str,
        scope: &str,
        creds: &Credentials,
        value: &str,
        ttl: Duration,
    ) {
        let key = (host.to_string(), scope.to_string(), creds.fingerprint());
        if let Ok(mut map) = self.map.lock() {
            let now = Instant::now();
            map.retain(|_, (_, until)| *until > now);
            map.insert(key, (value.to_string(), now + ttl));
        }
    }

    /// Drops a value the registry refused.
    pub(crate) fn forget(&self, host: &str, scope: &str, creds: &Credentials) {
        if let Ok(mut map) = self.map.lock() {
            map.remove(&(host.to_string(), scope.to_string(), creds.fingerprint()));
        }
    }
}

/// The pull scope for `repo`.
pub(crate) fn pull_scope(repo: &str) -> String {
    format!("repository:{repo}:pull")
}

/// What to send before any challenge: the caller's registry token, if any.
pub(crate) fn preset(creds: &Credentials) -> Option<String> {
    (!creds.registry_token.is_empty()).then(|| format!("Bearer {}", creds.registry_token))
}

/// Answers `challenges` from `host` for `repo`: an `Authorization` value and how long it lasts.
pub(crate) async fn authorize(
    http: &reqwest::Client,
    host: &str,
    repo: &str,
    challenges: &[Challenge],
    creds: &Credentials,
) -> Result<(String, Duration)> {
    let denied = |why: &str| {
        Error::new(
            ErrorKind::PermissionDenied,
            format!("registry {host}: repository {repo}: {why}"),
        )
    };
    if let Some(bearer) = challenges.iter().find(|c| c.scheme == "bearer") {
        if let Some(v) = preset(creds) {
            return Ok((v, DEFAULT_TOKEN_TTL));
        }
        return fetch_token(http, host, repo, bearer, creds).await;
    }
    if challenges.iter().any(|c| c.scheme == "basic") {
        let (u, p) = creds
            .user_password()
            .ok_or_else(|| denied("registry asks for a user name and password, none given"))?;
        return Ok((
            format!("Basic {}", B64.encode(format!("{u}:{p}"))),
            BASIC_TTL,
        ));
    }
    let schemes: Vec<&str> = challenges.iter().map(|c| c.scheme.as_str()).collect();
    Err(denied(&format!(
        "unsupported authentication challenge {schemes:?}"
    )))
}

#[derive(Deserialize)]
struct TokenResponse {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    access_token: Option<String>,
    #[serde(default)]
    expires_in: Option<u64>,
}

/// The distribution token flow: GET with Basic auth, or the OAuth2 refresh-token POST.
async fn fetch_token(
    http: &reqwest::Client,
    host: &str,
    repo: &str,
    challenge: &Challenge,
    creds: &Credentials,
) -> Result<(String, Duration)> {
    let what = format!("registry {host}: repository {repo}: token");
    let realm = challenge
        .param("realm")
        .ok_or_else(|| Error::unavailable(format!("{what}: bearer challenge without realm")))?;
    let mut url = reqwest::Url::parse(realm)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https"))
        .ok_or_else(|| Error::unavailable(format!("{what}: bad realm {realm:?}")))?;
    let service = challenge.param("service").unwrap_or_default();
    let scope = pull_scope(repo);
    let request = if !creds.identity_token.is_empty() {
        let form = [
            ("grant_type", "refresh_token"),
            ("refresh_token", creds.identity_token.as_str()),
            ("service", service),
            ("scope", scope.as_str()),
            ("client_id", CLIENT_ID),
        ];
        http.post(url).form(&form)
    } else {
        url.query_pairs_mut()
            .append_pair("service", service)
            .append_pair("scope", &scope);
        let req = http.get(url);
        match creds.user_password() {
            Some((u, p)) => req.basic_auth(u, Some(p)),
            None => req,
        }
    };
    let resp = request
        .send()
        .await
        .map_err(|e| Error::unavailable(format!("{what}: {realm}: {}", describe(&e))))?;
    let status = resp.status();
    if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
        return Err(Error::new(
            ErrorKind::PermissionDenied,
            format!("{what}: {realm} refused the credentials ({status})"),
        ));
    }
    if !status.is_success() {
        return Err(Error::unavailable(format!(
            "{what}: {realm} answered {status}"
        )));
    }
    let body = read_limited(resp, MAX_TOKEN_RESPONSE)
        .await
        .map_err(|e| e.context(&what))?;
    let parsed: TokenResponse = serde_json::from_slice(&body)
        .map_err(|e| Error::unavailable(format!("{what}: bad token response: {e}")))?;
    let token = parsed
        .token
        .or(parsed.access_token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| Error::unavailable(format!("{what}: response has no token")))?;
    let ttl = parsed
        .expires_in
        .map_or(DEFAULT_TOKEN_TTL, Duration::from_secs);
    // Renew a little early so a token does not expire between the check and the request.
    let ttl = ttl.saturating_sub(ttl / 10).max(Duration::from_secs(1));
    Ok((format!("Bearer {token}"), ttl))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_password_comes_from_fields_or_auth() {
        let explicit = Credentials {
            username: "u".into(),
            password: "p".into(),
            ..Default::default()
        };
        assert_eq!(explicit.user_password(), Some(("u".into(), "p".into())));
        let encoded = Credentials {
            auth: B64.encode("me:s3:cret"),
            ..Default::default()
        };
        assert_eq!(
            encoded.user_password(),
            Some(("me".into(), "s3:cret".into()))
        );
        assert!(!encoded.is_anonymous());
        assert_eq!(Credentials::default().user_password(), None);
        assert!(Credentials::default().is_anonymous());
        let garbage = Credentials {
            auth: "!!".into(),
            ..Default::default()
        };
        assert_eq!(garbage.user_password(), None);
    }

    #[test]
    fn debug_redacts_secrets() {
        let c = Credentials {
            username: "u".into(),
            password: "hunter2".into(),
            ..Default::default()
        };
        let s = format!("{c:?}");
        assert!(!s.contains("hunter2") && s.contains("<redacted>"), "{s}");
    }

    #[test]
    fn cache_is_keyed_by_credentials_and_expires() {
        let cache = TokenCache::default();
        let alice = Credentials {
            username: "alice".into(),
            ..Default::default()
        };
        let anon = Credentials::default();
        cache.put("h", "s", &alice, "Bearer a", Duration::from_secs(60));
        assert_eq!(cache.get("h", "s", &alice).as_deref(), Some("Bearer a"));
        assert_eq!(cache.get("h", "s", &anon), None);
        assert_eq!(cache.get("h", "other", &alice), None);
        cache.forget("h", "s", &alice);
        assert_eq!(cache.get("h", "s", &alice), None);
        cache.put("h", "s", &anon, "Bearer x", Duration::ZERO);
        assert_eq!(cache.get("h", "s", &anon), None);
    }
}
