//! Tests of registry authentication against in-process servers: Basic, Bearer, OAuth2, redirects.

use base64::Engine as _;

use crate::error::ErrorKind;
use crate::image::digest::Digest;
use crate::image::manifest::{media, Descriptor};
use crate::image::registry::testserver::{
    basic, client, image, reference, store, FakeRepo, Response, TestServer,
};
use crate::image::registry::Credentials;

/// A registry that wants `Bearer T1`, with a token endpoint on the same server that hands it
/// out for `user:pass` (GET) or refresh token `R` (POST).
async fn bearer_server(repo: FakeRepo) -> TestServer {
    TestServer::start(move |req| {
        if req.path.starts_with("/token") {
            let ok = match req.method.as_str() {
                "GET" => req.header("authorization") == Some(basic("user", "pass").as_str()),
                _ => String::from_utf8_lossy(&req.body).contains("refresh_token=R"),
            };
            let body = if req.method == "GET" {
                r#"{"token":"T1","expires_in":300}"#
            } else {
                r#"{"access_token":"T1"}"#
            };
            return if ok {
                Response::new(200, body)
            } else {
                Response::new(401, "{}")
            };
        }
        if req.header("authorization") == Some("Bearer T1") {
            return repo.handle(req);
        }
        let realm = format!("http://{}/token", req.header("host").unwrap_or_default());
        let challenge =
            format!(r#"Bearer realm="{realm}",service="fake",scope="repository:app:pull,push""#);
        Response::new(401, "{}").header("WWW-Authenticate", &challenge)
    })
    .await
}

#[tokio::test]
async fn bearer_token_flow_fetches_token_once_and_caches_it() {
    let img = image();
    let server = bearer_server(FakeRepo::new("app").with_image("v1", &img)).await;
    let c = client();
    let r = reference(&server, "app:v1");
    let creds = Credentials {
        username: "user".into(),
        password: "pass".into(),
        ..Default::default()
    };
    assert_eq!(
        c.resolve(&r, &creds).await.expect("first").digest,
        img.digest
    );
    assert_eq!(
        c.resolve(&r, &creds).await.expect("second").digest,
        img.digest
    );
    let tokens: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|q| q.path.starts_with("/token"))
        .collect();
    assert_eq!(tokens.len(), 1, "token cached");
    assert!(
        tokens[0].path.contains("service=fake"),
        "{}",
        tokens[0].path
    );
    assert!(
        tokens[0].path.contains("scope=repository%3Aapp%3Apull"),
        "{}",
        tokens[0].path
    );

    // Another caller without credentials must not ride on the cached token.
    let e = c
        .resolve(&r, &Credentials::default())
        .await
        .expect_err("anonymous");
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    assert!(
        e.to_string().contains(&server.host()) && e.to_string().contains("app"),
        "{e}"
    );
}

#[tokio::test]
async fn identity_token_uses_the_oauth2_refresh_post() {
    let img = image();
    let server = bearer_server(FakeRepo::new("app").with_image("v1", &img)).await;
    let creds = Credentials {
        identity_token: "R".into(),
        ..Default::default()
    };
    let res = client()
        .resolve(&reference(&server, "app:v1"), &creds)
        .await
        .expect("resolve");
    assert_eq!(res.digest, img.digest);
    let post = server
        .requests()
        .into_iter()
        .find(|q| q.method == "POST")
        .expect("token POST");
    let form = String::from_utf8_lossy(&post.body).into_owned();
    for part in [
        "grant_type=refresh_token",
        "service=fake",
        "client_id=bosun",
        "scope=repository%3Aapp%3Apull",
    ] {
        assert!(form.contains(part), "{form}");
    }
}

#[tokio::test]
async fn registry_token_is_sent_as_the_bearer() {
    let img = image();
    let server = bearer_server(FakeRepo::new("app").with_image("v1", &img)).await;
    let creds = Credentials {
        registry_token: "T1".into(),
        ..Default::default()
    };
    client()
        .resolve(&reference(&server, "app:v1"), &creds)
        .await
        .expect("resolve");
    assert!(server
        .requests()
        .iter()
        .all(|q| !q.path.starts_with("/token")));
    let wrong = Credentials {
        registry_token: "nope".into(),
        ..Default::default()
    };
    let e = client()
        .resolve(&reference(&server, "app:v1"), &wrong)
        .await
        .expect_err("refused");
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
}

#[tokio::test]
async fn basic_challenge_is_answered_and_wrong_password_is_permission_denied() {
    let img = image();
    let repo = FakeRepo::new("team/app").with_image("v1", &img);
    let server = TestServer::start(move |req| {
        if req.header("authorization") == Some(basic("user", "pass").as_str()) {
            repo.handle(req)
        } else {
            Response::new(401, "{}").header("WWW-Authenticate", r#"Basic realm="fake""#)
        }
    })
    .await;
    let r = reference(&server, "team/app:v1");
    let auth = base64::engine::general_purpose::STANDARD.encode("user:pass");
    let good = Credentials {
        auth,
        ..Default::default()
    };
    assert_eq!(
        client().resolve(&r, &good).await.expect("resolve").digest,
        img.digest
    );

    let bad = Credentials {
        username: "user".into(),
        password: "wrong".into(),
        ..Default::default()
    };
    let e = client()
        .resolve(&r, &bad)
        .await
        .expect_err("wrong password");
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&server.host()) && msg.contains("team/app"),
        "{msg}"
    );

    let e = client()
        .resolve(&r, &Credentials::default())
        .await
        .expect_err("anonymous");
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
}

#[tokio::test]
async fn blob_redirect_to_another_port_drops_authorization() {
    let img = image();
    let layer = img.layers[0].clone();
    let storage_bytes = layer.clone();
    let storage = TestServer::start(move |_| Response::new(200, storage_bytes.clone())).await;
    let location = format!("http://{}/storage/blob?sig=x", storage.host());
    let repo = FakeRepo::new("app").with_image("v1", &img);
    let registry = TestServer::start(move |req| {
        if req.header("authorization") != Some(basic("user", "pass").as_str()) {
            return Response::new(401, "").header("WWW-Authenticate", r#"Basic realm="r""#);
        }
        if req.path.contains("/blobs/") {
            return Response::new(307, "").header("Location", &location);
        }
        repo.handle(req)
    })
    .await;
    let r = reference(&registry, "app:v1");
    let creds = Credentials {
        username: "user".into(),
        password: "pass".into(),
        ..Default::default()
    };
    let c = client();
    let res = c.resolve(&r, &creds).await.expect("resolve");
    let (_dir, cs) = store();
    let d = Descriptor {
        media_type: media::OCI_LAYER.into(),
        digest: Digest::of(&layer),
        size: layer.len() as u64,
        platform: None,
        annotations: Default::default(),
    };
    let mut ingest = cs.ingest(&d.digest, Some(d.size)).expect("ingest");
    c.fetch_blob(&res.endpoint, &r, &creds, &d, &mut ingest, |_| {})
        .await
        .expect("fetch");
    ingest.commit().expect("commit");
    let at_storage = storage.requests();
    assert_eq!(at_storage.len(), 1);
    assert_eq!(at_storage[0].path, "/storage/blob?sig=x");
    assert!(
        at_storage[0].header("authorization").is_none(),
        "credentials leaked to storage"
    );
}
