//! Test-only HTTP/1.1 server and fake registry on 127.0.0.1, hand-written over tokio sockets.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use base64::Engine as _;

use crate::config::registry::RegistryConfig;
use crate::image::content::ContentStore;
use crate::image::digest::Digest;
use crate::image::manifest::{media, Descriptor};
use crate::image::reference::Reference;
use crate::image::registry::RegistryClient;

/// A parsed request.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub method: String,
    /// Path with query.
    pub path: String,
    /// Header names lowercased.
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// A canned response.
#[derive(Debug, Clone, Default)]
pub(crate) struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Sleep before answering (to make concurrent requests overlap).
    pub delay: Duration,
    /// Send only this many body bytes (with the full Content-Length), then close.
    pub cut: Option<usize>,
}

impl Response {
    pub fn new(status: u16, body: impl Into<Vec<u8>>) -> Self {
        Response {
            status,
            body: body.into(),
            ..Default::default()
        }
    }
    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.to_string(), v.to_string()));
        self
    }
    pub fn delayed(mut self, d: Duration) -> Self {
        self.delay = d;
        self
    }
    pub fn cut_at(mut self, n: usize) -> Self {
        self.cut = Some(n);
        self
    }
}

type Handler = Arc<dyn Fn(&Request) -> Response + Send + Sync>;

/// A server that answers every request with `handler` and logs it; stops when dropped.
pub(crate) struct TestServer {
    pub addr: SocketAddr,
    pub log: Arc<Mutex<Vec<Request>>>,
    task: tokio::task::JoinHandle<()>,
}

impl TestServer {
    pub async fn start(handler: impl Fn(&Request) -> Response + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let handler: Handler = Arc::new(handler);
        let task_log = log.clone();
        let task = tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let (h, l) = (handler.clone(), task_log.clone());
                tokio::spawn(async move {
                    let _ = serve(sock, h, l).await;
                });
            }
        });
        TestServer { addr, log, task }
    }

    /// `127.0.0.1:<port>`.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// How many requests had exactly `path`.
    pub fn count(&self, path: &str) -> usize {
        self.log
            .lock()
            .expect("log")
            .iter()
            .filter(|r| r.path == path)
            .count()
    }

    pub fn requests(&self) -> Vec<Request> {
        self.log.lock().expect("log").clone()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A port nothing listens on.
pub(crate) async fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    l.local_addr().expect("addr").port()
}

async fn serve(
    mut sock: TcpStream,
    handler: Handler,
    log: Arc<Mutex<Vec<Request>>>,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf[0] == 0x16 {
            // A TLS ClientHello: answer like Go's net/http does to HTTPS clients of plain servers.
            sock.write_all(b"HTTP/1.0 400 Bad Request\r\n\r\n").await?;
            return Ok(());
        }
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or_default().split(' ');
    let method = first.next().unwrap_or_default().to_string();
    let path = first.next().unwrap_or_default().to_string();
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    let req = Request {
        method,
        path,
        headers,
        body,
    };
    let resp = handler(&req);
    log.lock().expect("log").push(req);
    tokio::time::sleep(resp.delay).await;
    let mut out = format!(
        "HTTP/1.1 {} X\r\nContent-Length: {}\r\nConnection: close\r\n",
        resp.status,
        resp.body.len()
    );
    for (k, v) in &resp.headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    sock.write_all(out.as_bytes()).await?;
    let n = resp.cut.unwrap_or(resp.body.len()).min(resp.body.len());
    sock.write_all(&resp.body[..n]).await?;
    sock.shutdown().await
}

/// One image in a fake registry: manifest, config and layers, with their digests.
#[derive(Debug, Clone)]
pub(crate) struct FakeImage {
    pub manifest: Vec<u8>,
    pub digest: Digest,
    pub config: Vec<u8>,
    pub config_digest: Digest,
    pub layers: Vec<Vec<u8>>,
}

impl FakeImage {
    /// An OCI image whose layers are `layers` (uncompressed tar media type; never unpacked here).
    pub fn new(layers: &[&[u8]], arch: &str) -> Self {
        let diff_ids: Vec<String> = layers.iter().map(|l| Digest::of(l).to_string()).collect();
        let config = serde_json::json!({
            "architecture": arch, "os": "linux",
            "config": {"Cmd": ["/bin/sh"]},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        })
        .to_string()
        .into_bytes();
        let config_digest = Digest::of(&config);
        let descs: Vec<_> = layers
            .iter()
            .map(|l| serde_json::json!({"mediaType": media::OCI_LAYER, "digest": Digest::of(l), "size": l.len()}))
            .collect();
        let manifest = serde_json::json!({
            "schemaVersion": 2, "mediaType": media::OCI_MANIFEST,
            "config": {"mediaType": media::OCI_CONFIG, "digest": config_digest, "size": config.len()},
            "layers": descs,
        })
        .to_string()
        .into_bytes();
        FakeImage {
            digest: Digest::of(&manifest),
            manifest,
            config,
            config_digest,
            layers: layers.iter().map(|l| l.to_vec()).collect(),
        }
    }

    /// Every blob of the image by digest.
    pub fn blobs(&self) -> Vec<(Digest, Vec<u8>)> {
        let mut v = vec![(self.config_digest.clone(), self.config.clone())];
        v.extend(self.layers.iter().map(|l| (Digest::of(l), l.clone())));
        v
    }
}

/// Content a fake registry serves for one repository.
#[derive(Debug, Clone, Default)]
pub(crate) struct FakeRepo {
    pub repo: String,
    /// Tag or digest → (media type, bytes).
    pub manifests: HashMap<String, (String, Vec<u8>)>,
    pub blobs: HashMap<Digest, Vec<u8>>,
    /// Delay for blob answers.
    pub blob_delay: Duration,
    /// Whether blob GETs with `Range: bytes=N-` get 206 and the rest of the blob.
    pub ranges: bool,
}

impl FakeRepo {
    pub fn new(repo: &str) -> Self {
        FakeRepo {
            repo: repo.to_string(),
            ranges: true,
            ..Default::default()
        }
    }

    /// Adds `img` under `tag` (and its digest) with its blobs.
    pub fn with_image(mut self, tag: &str, img: &FakeImage) -> Self {
        let entry = (media::OCI_MANIFEST.to_string(), img.manifest.clone());
        self.manifests.insert(tag.to_string(), entry.clone());
        self.manifests.insert(img.digest.to_string(), entry);
        self.blobs.extend(img.blobs());
        self
    }

    /// Answers distribution GETs for this repository; anything else is a 404.
    pub fn handle(&self, req: &Request) -> Response {
        let prefix = format!("/v2/{}/", self.repo);
        let Some(rest) = req.path.strip_prefix(&prefix) else {
            return Response::new(404, "{}");
        };
        if let Some(r) = rest.strip_prefix("manifests/") {
            if let Some((mt, bytes)) = self.manifests.get(r) {
                return Response::new(200, bytes.clone())
                    .header("Content-Type", mt)
                    .header("Docker-Content-Digest", Digest::of(bytes).as_str());
            }
        }
        if let Some(d) = rest
            .strip_prefix("blobs/")
            .and_then(|d| Digest::parse(d).ok())
        {
            if let Some(bytes) = self.blobs.get(&d) {
                let from = req
                    .header("range")
                    .and_then(|r| r.strip_prefix("bytes="))
                    .and_then(|r| r.strip_suffix('-'))
                    .and_then(|n| n.parse::<usize>().ok())
                    .filter(|n| self.ranges && *n < bytes.len());
                return match from {
                    Some(n) => Response::new(206, bytes[n..].to_vec()).header(
                        "Content-Range",
                        &format!("bytes {n}-{}/{}", bytes.len() - 1, bytes.len()),
                    ),
                    None => Response::new(200, bytes.clone()),
                }
                .delayed(self.blob_delay);
            }
        }
        Response::new(
            404,
            r#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}"#,
        )
    }
}

pub(crate) fn client() -> RegistryClient {
    RegistryClient::new(&RegistryConfig::default()).expect("client")
}

pub(crate) fn reference(server: &TestServer, rest: &str) -> Reference {
    Reference::parse(&format!("{}/{rest}", server.host())).expect("reference")
}

pub(crate) fn image() -> FakeImage {
    FakeImage::new(&[b"layer one", b"layer two"], "amd64")
}

/// The descriptor of an uncompressed layer made of `bytes`.
pub(crate) fn layer_descriptor(bytes: &[u8]) -> Descriptor {
    Descriptor {
        media_type: media::OCI_LAYER.into(),
        digest: Digest::of(bytes),
        size: bytes.len() as u64,
        platform: None,
        annotations: Default::default(),
    }
}

pub(crate) fn basic(user: &str, pass: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
    )
}

pub(crate) fn store() -> (tempfile::TempDir, ContentStore) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cs = ContentStore::open(dir.path()).expect("store");
    (dir, cs)
}

pub(crate) fn ingest_files(cs: &ContentStore) -> usize {
    std::fs::read_dir(cs.root().join("ingest"))
        .expect("ls ingest")
        .count()
}
