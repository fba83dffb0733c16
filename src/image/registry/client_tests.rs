//! Tests of the registry client against in-process HTTP servers: endpoints, digests, blobs.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::config::registry::HostConfig;
use crate::image::manifest::media;
use crate::image::registry::testserver::{
    self, client, closed_port, image, ingest_files, reference, store, FakeImage, FakeRepo,
    Response, TestServer,
};

#[tokio::test]
async fn resolve_by_tag_over_plain_http_fallback() {
    let img = image();
    let repo = FakeRepo::new("app").with_image("v1", &img);
    let server = TestServer::start(move |req| repo.handle(req)).await;
    let r = reference(&server, "app:v1");
    let res = client()
        .resolve(&r, &Credentials::default())
        .await
        .expect("resolve");
    assert_eq!(res.digest, img.digest);
    assert_eq!(res.media_type, media::OCI_MANIFEST);
    assert_eq!(res.bytes, img.manifest);
    assert!(!res.endpoint.mirror);
    let req = &server.requests()[0];
    assert!(req
        .header("accept")
        .is_some_and(|a| a.contains(media::DOCKER_LIST)));
}

#[tokio::test]
async fn mirrors_are_tried_in_order_and_a_refusing_one_is_skipped() {
    let img = image();
    let repo = FakeRepo::new("library/busybox").with_image("latest", &img);
    let mirror = TestServer::start(move |req| repo.handle(req)).await;
    let dead = closed_port().await;
    let mut config = RegistryConfig::default();
    let mirrors = vec![
        format!("http://127.0.0.1:{dead}"),
        format!("http://{}", mirror.host()),
    ];
    config.hosts.insert(
        "docker.io".into(),
        HostConfig {
            mirrors,
            ..Default::default()
        },
    );
    let c = RegistryClient::new(&config).expect("client");
    let creds = Credentials {
        username: "hub".into(),
        password: "secret".into(),
        ..Default::default()
    };
    let res = c
        .resolve(&Reference::parse("busybox").expect("ref"), &creds)
        .await
        .expect("resolve");
    assert_eq!(res.digest, img.digest);
    assert!(res.endpoint.mirror);
    assert_eq!(res.endpoint.host, mirror.host());
    assert_eq!(mirror.count("/v2/library/busybox/manifests/latest"), 1);
    // The credentials were chosen for Docker Hub: the mirror is asked anonymously.
    assert!(mirror
        .requests()
        .iter()
        .all(|q| q.header("authorization").is_none()));
}

#[tokio::test]
async fn unreachable_registry_is_unavailable_quickly_naming_the_host() {
    let port = closed_port().await;
    let r = Reference::parse(&format!("127.0.0.1:{port}/app")).expect("ref");
    let started = Instant::now();
    let e = client()
        .resolve(&r, &Credentials::default())
        .await
        .expect_err("refused");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!(
            "registry 127.0.0.1:{port}: connect: connection refused"
        )),
        "{msg}"
    );
}

#[tokio::test]
async fn manifest_missing_everywhere_is_not_found_naming_the_reference() {
    let repo = FakeRepo::new("app");
    let server = TestServer::start(move |req| repo.handle(req)).await;
    let r = reference(&server, "app:gone");
    let e = client()
        .resolve(&r, &Credentials::default())
        .await
        .expect_err("missing");
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    assert!(
        e.to_string()
            .contains(&format!("{}/app:gone", server.host())),
        "{e}"
    );
}

#[tokio::test]
async fn manifest_not_matching_the_requested_digest_is_refused() {
    let img = image();
    let other = FakeImage::new(&[b"something else"], "amd64");
    let mut repo = FakeRepo::new("app");
    // The registry answers the digest of `img` with the bytes of `other`.
    repo.manifests
        .insert(img.digest.to_string(), ("".into(), other.manifest.clone()));
    let server = TestServer::start(move |req| repo.handle(req)).await;
    let r = reference(&server, &format!("app@{}", img.digest));
    let e = client()
        .resolve(&r, &Credentials::default())
        .await
        .expect_err("mismatch");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.to_string().contains(&r.to_string()), "{e}");
}

#[tokio::test]
async fn docker_content_digest_header_must_match_a_tag_fetch() {
    let img = image();
    let bytes = img.manifest.clone();
    let server = TestServer::start(move |_| {
        Response::new(200, bytes.clone())
            .header("Content-Type", media::OCI_MANIFEST)
            .header("Docker-Content-Digest", Digest::of(b"lie").as_str())
    })
    .await;
    let e = client()
        .resolve(&reference(&server, "app:v1"), &Credentials::default())
        .await;
    assert_eq!(
        e.expect_err("header mismatch").kind(),
        ErrorKind::InvalidArgument
    );
}

#[tokio::test]
async fn a_server_error_is_retried_once() {
    let img = image();
    let repo = FakeRepo::new("app").with_image("v1", &img);
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let server = TestServer::start(move |req| {
        if seen.fetch_add(1, Ordering::SeqCst) == 0 {
            Response::new(503, "busy")
        } else {
            repo.handle(req)
        }
    })
    .await;
    client()
        .resolve(&reference(&server, "app:v1"), &Credentials::default())
        .await
        .expect("resolve");
    assert_eq!(server.count("/v2/app/manifests/v1"), 2);
}

#[tokio::test]
async fn blob_streams_into_the_store_and_a_tampered_one_leaves_nothing() {
    let img = image();
    let mut repo = FakeRepo::new("app").with_image("v1", &img);
    let good = img.layers[0].clone();
    let tampered = img.layers[1].clone();
    // Same size, different bytes: only the digest check can catch it.
    repo.blobs
        .insert(Digest::of(&tampered), b"layer TWO".to_vec());
    let server = TestServer::start(move |req| repo.handle(req)).await;
    let r = reference(&server, "app:v1");
    let c = client();
    let res = c
        .resolve(&r, &Credentials::default())
        .await
        .expect("resolve");
    let (_dir, cs) = store();

    let desc = |bytes: &[u8]| Descriptor {
        media_type: media::OCI_LAYER.into(),
        digest: Digest::of(bytes),
        size: bytes.len() as u64,
        platform: None,
        annotations: Default::default(),
    };
    let d = desc(&good);
    let mut ingest = cs.ingest(&d.digest, Some(d.size)).expect("ingest");
    let mut progress = Vec::new();
    c.fetch_blob(
        &res.endpoint,
        &r,
        &Credentials::default(),
        &d,
        &mut ingest,
        |n| progress.push(n),
    )
    .await
    .expect("fetch");
    ingest.commit().expect("commit");
    assert!(cs.contains(&d.digest));
    assert_eq!(progress.last(), Some(&(good.len() as u64)));

    let d = desc(&tampered);
    let mut ingest = cs.ingest(&d.digest, Some(d.size)).expect("ingest");
    c.fetch_blob(
        &res.endpoint,
        &r,
        &Credentials::default(),
        &d,
        &mut ingest,
        |_| {},
    )
    .await
    .expect("fetch");
    let e = ingest.commit().expect_err("digest mismatch");
    assert!(e.to_string().contains(d.digest.as_str()), "{e}");
    assert!(!cs.contains(&d.digest));
    assert_eq!(ingest_files(&cs), 0);
}

#[tokio::test]
async fn a_loopback_registry_failing_both_schemes_reports_the_tls_error_too() {
    // Answers TLS with garbage and plain HTTP with 400, as a TLS server does to plain HTTP.
    let server = TestServer::start(|_| Response::new(400, "Client sent an HTTP request")).await;
    let e = client()
        .resolve(&reference(&server, "app:v1"), &Credentials::default())
        .await;
    let e = e.expect_err("neither scheme works");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("connect: https: ") && msg.contains("; http: "),
        "{msg}"
    );
}

/// Short pauses, so tests of giving up run fast.
fn fast() -> RetryPolicy {
    RetryPolicy {
        first_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(40),
        ..RetryPolicy::default()
    }
}

/// A 10 000-byte layer, its image in repository `app` and its descriptor.
fn big_layer() -> (FakeRepo, Descriptor) {
    let layer: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    let img = FakeImage::new(&[&layer], "amd64");
    let repo = FakeRepo::new("app").with_image("v1", &img);
    (repo, testserver::layer_descriptor(&layer))
}

/// Fetches `desc` into a resumable ingest and commits it; the blob requests' `Range` headers.
async fn fetch_and_commit(server: &TestServer, desc: &Descriptor) -> Vec<Option<String>> {
    let r = reference(server, "app:v1");
    let c = client().with_policy(fast());
    let res = c
        .resolve(&r, &Credentials::default())
        .await
        .expect("resolve");
    let (_dir, cs) = store();
    let mut ingest = cs.resume(&desc.digest, desc.size).expect("ingest");
    c.fetch_blob(
        &res.endpoint,
        &r,
        &Credentials::default(),
        desc,
        &mut ingest,
        |_| {},
    )
    .await
    .expect("fetch");
    ingest.commit().expect("commit");
    assert!(cs.contains(&desc.digest));
    server
        .requests()
        .iter()
        .filter(|q| q.path.contains("/blobs/"))
        .map(|q| q.header("range").map(str::to_string))
        .collect()
}

/// The first GET whose path contains `path` gets `first`; everything else is `repo`'s answer.
async fn serve_first_with(
    repo: FakeRepo,
    path: &'static str,
    first: impl Fn(&FakeRepo, &testserver::Request) -> Response + Send + Sync + 'static,
) -> TestServer {
    let seen = AtomicUsize::new(0);
    TestServer::start(move |req| {
        if req.path.contains(path) && seen.fetch_add(1, Ordering::SeqCst) == 0 {
            first(&repo, req)
        } else {
            repo.handle(req)
        }
    })
    .await
}

#[tokio::test]
async fn a_body_that_breaks_off_is_resumed_with_range() {
    let (repo, desc) = big_layer();
    let server = serve_first_with(repo, "/blobs/", |repo, req| repo.handle(req).cut_at(4000)).await;
    let ranges = fetch_and_commit(&server, &desc).await;
    assert_eq!(ranges, [None, Some("bytes=4000-".to_string())]);
}

#[tokio::test]
async fn a_registry_ignoring_range_is_read_from_byte_0() {
    let (mut repo, desc) = big_layer();
    repo.ranges = false;
    let server = serve_first_with(repo, "/blobs/", |repo, req| repo.handle(req).cut_at(4000)).await;
    let ranges = fetch_and_commit(&server, &desc).await;
    assert_eq!(ranges, [None, Some("bytes=4000-".to_string())]);
}

#[tokio::test]
async fn a_206_with_another_range_than_asked_starts_over() {
    let (repo, desc) = big_layer();
    let seen = AtomicUsize::new(0);
    let server = TestServer::start(move |req| {
        let resp = repo.handle(req);
        if !req.path.contains("/blobs/") {
            return resp;
        }
        match seen.fetch_add(1, Ordering::SeqCst) {
            0 => resp.cut_at(4000),
            // Asked for 4000-, answers the right bytes under a range that starts elsewhere.
            1 => Response::new(206, resp.body).header("Content-Range", "bytes 3000-9999/10000"),
            _ => resp,
        }
    })
    .await;
    let ranges = fetch_and_commit(&server, &desc).await;
    assert_eq!(ranges, [None, Some("bytes=4000-".to_string()), None]);
}

#[test]
fn content_ranges_parse_strictly() {
    assert_eq!(content_range("bytes 0-9/10"), Some((0, 9, Some(10))));
    assert_eq!(content_range("bytes 5-9/*"), Some((5, 9, None)));
    for bad in [
        "bytes 9-5/10",
        "bytes */10",
        "items 0-9/10",
        "bytes 0-9",
        "bytes a-9/10",
    ] {
        assert_eq!(content_range(bad), None, "{bad}");
    }
}

#[tokio::test]
async fn a_rate_limited_manifest_is_asked_again_after_retry_after() {
    let repo = FakeRepo::new("app").with_image("v1", &image());
    let server = serve_first_with(repo, "/manifests/", |_, _| {
        Response::new(429, "slow down").header("Retry-After", "1")
    })
    .await;
    let started = Instant::now();
    client()
        .resolve(&reference(&server, "app:v1"), &Credentials::default())
        .await
        .expect("resolve");
    assert!(started.elapsed() >= Duration::from_millis(950));
    assert_eq!(server.count("/v2/app/manifests/v1"), 2);
}

#[tokio::test]
async fn a_retry_after_beyond_the_cap_is_not_waited_for() {
    let server = TestServer::start(|_| Response::new(429, "").header("Retry-After", "3600")).await;
    let started = Instant::now();
    let e = client()
        .resolve(&reference(&server, "app:v1"), &Credentials::default())
        .await
        .expect_err("rate limited");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.to_string().contains("retry after 3600 s"), "{e}");
    assert_eq!(server.count("/v2/app/manifests/v1"), 1);
}

#[tokio::test]
async fn a_registry_failing_every_time_is_given_up_on_after_five_attempts() {
    let server = TestServer::start(|_| Response::new(503, "down")).await;
    let e = client()
        .with_policy(fast())
        .resolve(&reference(&server, "app:v1"), &Credentials::default())
        .await
        .expect_err("down");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.to_string().contains("gave up after 5 attempts"), "{e}");
    assert_eq!(server.count("/v2/app/manifests/v1"), 5);
}

#[tokio::test]
async fn a_manifest_body_that_breaks_off_is_asked_for_again() {
    let img = image();
    let repo = FakeRepo::new("app").with_image("v1", &img);
    let server =
        serve_first_with(repo, "/manifests/", |repo, req| repo.handle(req).cut_at(10)).await;
    let res = client()
        .with_policy(fast())
        .resolve(&reference(&server, "app:v1"), &Credentials::default())
        .await
        .expect("resolve");
    assert_eq!(res.digest, img.digest);
    assert_eq!(server.count("/v2/app/manifests/v1"), 2);
}
