//! Tests of `image::pull` against an in-process fake registry (kept beside the fake server).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::config::registry::RegistryConfig;
use crate::error::ErrorKind;
use crate::image::registry::testserver::{FakeImage, FakeRepo, Response, TestServer};

struct Fixture {
    _dir: tempfile::TempDir,
    content: ContentStore,
    puller: Puller,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let content = ContentStore::open(dir.path()).expect("store");
    let registry = RegistryClient::new(&RegistryConfig::default()).expect("client");
    let puller = Puller::new(registry, content.clone(), 0);
    Fixture {
        _dir: dir,
        content,
        puller,
    }
}

fn image() -> FakeImage {
    FakeImage::new(
        &[b"base layer bytes", b"top layer bytes"],
        &Platform::host().architecture,
    )
}

fn reference(server: &TestServer, rest: &str) -> Reference {
    Reference::parse(&format!("{}/{rest}", server.host())).expect("reference")
}

fn blob_path(d: &Digest) -> String {
    format!("/v2/app/blobs/{d}")
}

async fn settle(p: &Puller) {
    for _ in 0..200 {
        if p.downloads.in_flight() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("downloads did not settle");
}

/// Pulls `r` in a task of its own (to cancel it).
fn spawn_pull(p: &Puller, r: &Reference) -> tokio::task::JoinHandle<Result<PulledImage>> {
    let (p, r) = (p.clone(), r.clone());
    tokio::spawn(async move { p.pull(&r, &Credentials::default(), None).await })
}

/// Interrupted downloads kept in the store.
fn partials(f: &Fixture) -> usize {
    std::fs::read_dir(f.content.root().join("partial"))
        .expect("ls partial")
        .count()
}

fn drain(rx: &mut mpsc::UnboundedReceiver<PullEvent>) -> Vec<PullEvent> {
    let mut v = Vec::new();
    while let Ok(e) = rx.try_recv() {
        v.push(e);
    }
    v
}

#[tokio::test]
async fn pull_stores_every_blob_and_a_second_pull_is_all_cached() {
    let img = image();
    let repo = FakeRepo::new("app").with_image("v1", &img);
    let server = TestServer::start(move |req| repo.handle(req)).await;
    let f = fixture();
    let r = reference(&server, "app:v1");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let pulled = f
        .puller
        .pull(&r, &Credentials::default(), Some(tx))
        .await
        .expect("pull");
    assert_eq!(pulled.manifest_digest, img.digest);
    assert_eq!(pulled.repo_digest(), &img.digest);
    assert_eq!(pulled.config_digest, img.config_digest);
    assert_eq!(pulled.config.rootfs.diff_ids.len(), 2);
    assert!(f.content.contains(&img.digest));
    for (d, _) in img.blobs() {
        assert!(f.content.contains(&d), "{d} stored");
    }
    let events = drain(&mut rx);
    assert!(
        matches!(&events[0], PullEvent::Resolved { digest, layers } if *digest == img.digest && layers.len() == 2)
    );
    let done = events
        .iter()
        .filter(|e| matches!(e, PullEvent::Done { .. }))
        .count();
    assert_eq!(done, 2, "{events:?}");
    assert!(events
        .iter()
        .any(|e| matches!(e, PullEvent::Progress { done, total, .. } if done == total)));

    let (tx, mut rx) = mpsc::unbounded_channel();
    f.puller
        .pull(&r, &Credentials::default(), Some(tx))
        .await
        .expect("second pull");
    let events = drain(&mut rx);
    let cached = events
        .iter()
        .filter(|e| matches!(e, PullEvent::Cached { .. }))
        .count();
    assert_eq!(cached, 2, "{events:?}");
    for (d, _) in img.blobs() {
        assert_eq!(server.count(&blob_path(&d)), 1, "{d} fetched once");
    }
}

#[tokio::test]
async fn concurrent_pulls_of_two_tags_download_each_blob_once() {
    let img = image();
    let mut repo = FakeRepo::new("app")
        .with_image("v1", &img)
        .with_image("v2", &img);
    repo.blob_delay = Duration::from_millis(300);
    let server = TestServer::start(move |req| repo.handle(req)).await;
    let f = fixture();
    let (a, b) = (reference(&server, "app:v1"), reference(&server, "app:v2"));
    let (p1, p2) = (f.puller.clone(), f.puller.clone());
    let creds = Credentials::default();
    let (r1, r2) = tokio::join!(p1.pull(&a, &creds, None), p2.pull(&b, &creds, None));
    assert_eq!(r1.expect("pull v1").manifest_digest, img.digest);
    assert_eq!(r2.expect("pull v2").manifest_digest, img.digest);
    for (d, _) in img.blobs() {
        assert_eq!(server.count(&blob_path(&d)), 1, "{d} requested once");
    }
}

#[tokio::test]
async fn a_cancelled_pull_does_not_abort_the_download_another_pull_shares() {
    let img = image();
    let mut repo = FakeRepo::new("app").with_image("v1", &img);
    repo.blob_delay = Duration::from_millis(300);
    let server = TestServer::start(move |req| repo.handle(req)).await;
    let f = fixture();
    let r = reference(&server, "app:v1");
    let first = spawn_pull(&f.puller, &r);
    // The second pull joins the first one's download before the first is cancelled (a
    // download nobody waits for any more stops).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = spawn_pull(&f.puller, &r);
    tokio::time::sleep(Duration::from_millis(50)).await;
    first.abort();
    let pulled = second
        .await
        .expect("second pull task")
        .expect("second pull");
    assert_eq!(pulled.manifest_digest, img.digest);
    for (d, _) in img.blobs() {
        assert!(f.content.contains(&d));
        assert_eq!(server.count(&blob_path(&d)), 1, "{d} requested once");
    }
}

#[tokio::test]
async fn a_tampered_layer_fails_naming_it_and_leaves_nothing_behind() {
    let img = image();
    let bad = Digest::of(&img.layers[1]);
    let good = FakeRepo::new("app").with_image("v1", &img);
    let mut tampered = good.clone();
    // Same size, other bytes: only the digest check can tell.
    tampered
        .blobs
        .insert(bad.clone(), b"top layer BYTES".to_vec());
    let fixed = Arc::new(AtomicBool::new(false));
    let is_fixed = fixed.clone();
    let server = TestServer::start(move |req| {
        if is_fixed.load(Ordering::SeqCst) {
            good.handle(req)
        } else {
            tampered.handle(req)
        }
    })
    .await;
    let f = fixture();
    let r = reference(&server, "app:v1");
    let e = f
        .puller
        .pull(&r, &Credentials::default(), None)
        .await
        .expect_err("tampered");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.to_string().contains(&format!("layer {bad}")), "{e}");
    // The failed pull lets its other layer finish (stored for the retry) before it answers.
    settle(&f.puller).await;
    assert!(!f.content.contains(&bad));
    assert_eq!(
        std::fs::read_dir(f.content.root().join("ingest"))
            .expect("ls")
            .count(),
        0
    );

    // A later pull reuses what was verified and fetches only the missing layer.
    fixed.store(true, Ordering::SeqCst);
    f.puller
        .pull(&r, &Credentials::default(), None)
        .await
        .expect("pull after the fix");
    assert!(f.content.contains(&bad));
    assert_eq!(server.count(&blob_path(&Digest::of(&img.layers[0]))), 1);
    // The failed pull fetched the tampered layer twice (a mismatch is fetched once more from
    // byte 0), the later pull once.
    assert_eq!(server.count(&blob_path(&bad)), 3);
}

#[tokio::test]
async fn a_pull_whose_every_caller_left_stops_its_downloads() {
    let img = image();
    let mut repo = FakeRepo::new("app").with_image("v1", &img);
    repo.blob_delay = Duration::from_millis(600);
    let server = TestServer::start(move |req| repo.handle(req)).await;
    let f = fixture();
    let first = spawn_pull(&f.puller, &reference(&server, "app:v1"));
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        f.puller.downloads.in_flight(),
        1,
        "the config is downloading"
    );
    first.abort();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(f.puller.downloads.in_flight(), 0, "nobody waits: stopped");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!f.content.contains(&img.config_digest));
    assert_eq!(partials(&f), 0, "no bytes arrived, none are kept");
}

#[tokio::test]
async fn an_interrupted_download_resumes_from_the_bytes_it_stored() {
    let img = image();
    let repo = FakeRepo::new("app").with_image("v1", &img);
    let server = TestServer::start(move |req| repo.handle(req)).await;
    let f = fixture();
    // What a daemon killed mid-layer leaves: the first 5 bytes of the base layer.
    let base = &img.layers[0];
    let d = Digest::of(base);
    let mut ingest = f.content.resume(&d, base.len() as u64).expect("ingest");
    ingest.write(&base[..5]).expect("write");
    drop(ingest);
    f.puller
        .pull(&reference(&server, "app:v1"), &Credentials::default(), None)
        .await
        .expect("pull");
    assert!(f.content.contains(&d));
    let asked: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|q| q.path == blob_path(&d))
        .map(|q| q.header("range").map(str::to_string))
        .collect();
    assert_eq!(asked, [Some("bytes=5-".to_string())]);
    assert_eq!(partials(&f), 0);
}

#[tokio::test]
async fn an_index_resolves_to_the_host_platform() {
    let host = Platform::host();
    let other_arch = if host.architecture == "s390x" {
        "amd64"
    } else {
        "s390x"
    };
    let mine = image();
    let other = FakeImage::new(&[b"other arch layer"], other_arch);
    let entry = |img: &FakeImage, p: &Platform| serde_json::json!({"mediaType": media::OCI_MANIFEST, "digest": img.digest, "size": img.manifest.len(), "platform": p});
    let other_platform = Platform {
        architecture: other_arch.into(),
        os: "linux".into(),
        variant: None,
    };
    let index = serde_json::json!({
        "schemaVersion": 2, "mediaType": media::OCI_INDEX,
        "manifests": [entry(&other, &other_platform), entry(&mine, &host)],
    })
    .to_string()
    .into_bytes();
    let index_digest = Digest::of(&index);
    let mut repo = FakeRepo::new("app")
        .with_image("mine", &mine)
        .with_image("other", &other);
    repo.manifests
        .insert("multi".into(), (media::OCI_INDEX.into(), index.clone()));
    let server = TestServer::start(move |req| repo.handle(req)).await;
    let f = fixture();
    let pulled = f
        .puller
        .pull(
            &reference(&server, "app:multi"),
            &Credentials::default(),
            None,
        )
        .await
        .expect("pull");
    assert_eq!(pulled.manifest_digest, mine.digest);
    assert_eq!(pulled.index_digest.as_ref(), Some(&index_digest));
    assert_eq!(pulled.repo_digest(), &index_digest);
    assert!(f.content.contains(&index_digest) && f.content.contains(&mine.digest));
    assert!(!f.content.contains(&other.digest));
    assert_eq!(server.count(&blob_path(&Digest::of(&other.layers[0]))), 0);
}

#[tokio::test]
async fn an_index_without_the_host_platform_names_what_it_has() {
    let other = FakeImage::new(&[b"x"], "mips64le");
    let p = Platform {
        architecture: "mips64le".into(),
        os: "linux".into(),
        variant: None,
    };
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": media::OCI_MANIFEST, "digest": other.digest, "size": other.manifest.len(), "platform": p}],
    })
    .to_string()
    .into_bytes();
    let mut repo = FakeRepo::new("app");
    repo.manifests
        .insert("multi".into(), (media::OCI_INDEX.into(), index));
    let server = TestServer::start(move |req| repo.handle(req)).await;
    let r = reference(&server, "app:multi");
    let e = fixture()
        .puller
        .pull(&r, &Credentials::default(), None)
        .await
        .expect_err("no platform");
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&r.to_string()) && msg.contains("linux/mips64le"),
        "{msg}"
    );
}

#[tokio::test]
async fn an_unknown_layer_media_type_is_refused_before_downloading() {
    let img = image();
    let text = String::from_utf8(img.manifest.clone()).expect("utf8");
    let manifest = text
        .replace(media::OCI_LAYER, "application/x-not-a-layer")
        .into_bytes();
    let mut repo = FakeRepo::new("app").with_image("v1", &img);
    repo.manifests
        .insert("weird".into(), (media::OCI_MANIFEST.into(), manifest));
    let server = TestServer::start(move |req| repo.handle(req)).await;
    let f = fixture();
    let e = f
        .puller
        .pull(
            &reference(&server, "app:weird"),
            &Credentials::default(),
            None,
        )
        .await;
    let e = e.expect_err("bad media type");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.to_string().contains("application/x-not-a-layer"), "{e}");
    assert!(server
        .requests()
        .iter()
        .all(|q| !q.path.contains("/blobs/")));
}

#[tokio::test]
async fn a_failed_layer_lets_the_layers_under_way_finish_before_the_pull_answers() {
    let img = image();
    let (slow, missing) = (Digest::of(&img.layers[0]), Digest::of(&img.layers[1]));
    let repo = FakeRepo::new("app").with_image("v1", &img);
    let (slow_path, missing_path) = (blob_path(&slow), blob_path(&missing));
    let server = TestServer::start(move |req| {
        if req.path == missing_path {
            Response::new(404, "{}")
        } else if req.path == slow_path {
            repo.handle(req).delayed(Duration::from_millis(300))
        } else {
            repo.handle(req)
        }
    })
    .await;
    let f = fixture();
    let e = f
        .puller
        .pull(&reference(&server, "app:v1"), &Credentials::default(), None)
        .await
        .expect_err("a layer is missing");
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    assert!(e.to_string().contains(&format!("layer {missing}")), "{e}");
    assert!(f.content.contains(&slow), "the other layer is stored");
}
