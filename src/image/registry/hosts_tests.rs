//! Tests of containerd's host directories: hosts.toml fields, directory lookup, and how they meet bosun's `[registry.hosts]`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::hosts::{Hosts, PullHosts, Scheme};
use super::hosts_dir::HostsDirs;
use super::hosts_toml::{self, HostUrl};
use crate::config::registry::{from_toml, RegistryConfig};

fn parse(text: &str) -> crate::Result<hosts_toml::HostsFile> {
    hosts_toml::parse(
        Path::new("/etc/containerd/certs.d/r.example/hosts.toml"),
        Path::new("/etc/containerd/certs.d/r.example"),
        text,
    )
}

fn refused(text: &str) -> String {
    parse(text).expect_err(text).to_string()
}

#[test]
fn every_field_of_a_hosts_file_is_read_in_file_order() {
    let f = parse(
        r#"
        server = "https://registry.example:5000"
        ca = "/etc/ssl/top.pem"
        skip_verify = false

        [host."https://z-mirror.example"]
          capabilities = ["pull", "resolve"]
          ca = ["ca1.pem", "/abs/ca2.pem"]
          client = [["client.cert", "client.key"]]
          dial_timeout = "2s"
          [host."https://z-mirror.example".header]
            x-custom = "1"
            x-multi = ["a", "b"]

        [host."http://a-mirror.example:8080/x/../cache//./"]
          capabilities = ["pull"]
          skip_verify = true
          override_path = true

        [host."b-mirror.example"]
          client = "both.pem"
        "#,
    )
    .expect("parse");
    let dir = Path::new("/etc/containerd/certs.d/r.example");
    let urls: Vec<&HostUrl> = f.hosts.iter().filter_map(|h| h.url.as_ref()).collect();
    assert_eq!(
        urls.iter().map(|u| u.host.as_str()).collect::<Vec<_>>(),
        [
            "z-mirror.example",
            "a-mirror.example:8080",
            "b-mirror.example"
        ],
        "file order, not name order"
    );
    let z = &f.hosts[0];
    assert!(z.pull && z.resolve);
    assert_eq!(urls[0].path, "/v2");
    assert_eq!(urls[0].scheme, Scheme::Https);
    assert_eq!(
        z.client.ca_files,
        [dir.join("ca1.pem"), PathBuf::from("/abs/ca2.pem")]
    );
    assert_eq!(
        z.client.client_cert,
        Some((dir.join("client.cert"), Some(dir.join("client.key"))))
    );
    assert_eq!(z.client.dial_timeout, Some(Duration::from_secs(2)));
    assert_eq!(
        z.client.headers,
        [
            ("x-custom".to_string(), "1".to_string()),
            ("x-multi".into(), "a".into()),
            ("x-multi".into(), "b".into())
        ]
    );
    let a = &f.hosts[1];
    assert!(a.pull && !a.resolve && a.client.skip_verify);
    assert_eq!(urls[1].path, "/cache", "override_path: no /v2");
    assert_eq!(
        urls[1].scheme,
        Scheme::HttpsThenHttp,
        "http with TLS settings tries HTTPS first, as containerd does"
    );
    assert_eq!(urls[2].scheme, Scheme::Https, "no scheme: https");
    assert_eq!(
        f.hosts[2].client.client_cert,
        Some((dir.join("both.pem"), None))
    );
    let server = f.server.url.as_ref().expect("server");
    assert_eq!(server.host, "registry.example:5000");
    assert_eq!(server.path, "/v2");
    assert_eq!(
        f.server.client.ca_files,
        [PathBuf::from("/etc/ssl/top.pem")]
    );
}

#[test]
fn a_file_without_server_leaves_the_registry_itself_last() {
    let f = parse("[host.\"http://127.0.0.1:5001\"]\ncapabilities = [\"pull\", \"resolve\"]\n")
        .expect("parse");
    assert!(f.server.url.is_none() && f.server.pull && f.server.resolve);
    let u = f.hosts[0].url.as_ref().expect("url");
    assert_eq!(
        (u.scheme, u.host.as_str()),
        (Scheme::Http, "127.0.0.1:5001")
    );
    let v2 = parse("server = \"https://r.example/v2/\"\n").expect("parse");
    assert_eq!(v2.server.url.expect("url").path, "/v2", "no second /v2");
}

#[test]
fn bad_files_are_refused_naming_the_file_and_the_key() {
    let file = "/etc/containerd/certs.d/r.example/hosts.toml";
    for (text, key) in [
        ("skip-verify = true", "skip-verify: unknown key"),
        (
            "[host.\"https://m\"]\nca_file = \"x\"",
            "host.\"https://m\".ca_file: unknown key",
        ),
        ("skip_verify = \"yes\"", "skip_verify: a boolean"),
        ("override_path = 1", "override_path: a boolean"),
        (
            "capabilities = [\"pull\", \"fly\"]",
            "capabilities: unknown capability \"fly\"",
        ),
        ("ca = 5", "ca: a string or a list of strings"),
        ("ca = [\"a\", 5]", "ca: a list of strings"),
        (
            "client = [[\"a\"]]",
            "client: a pair must be [certificate, key]",
        ),
        ("client = [\"a\", \"b\"]", "client: 2 client certificates"),
        ("[header]\nx = 1", "header.x: a string or a list"),
        (
            "[header]\n\"bad name\" = \"v\"",
            "header: header \"bad name\"",
        ),
        ("header = \"x\"", "header: a table"),
        (
            "dial_timeout = \"soon\"",
            "dial_timeout: \"soon\" is not a duration",
        ),
        (
            "server = \"ftp://r.example\"",
            "server: \"ftp://r.example\": unsupported scheme",
        ),
        ("server = 1", "server: a string"),
        ("[host.\"https://m?x=1\"]", "host.\"https://m?x=1\": "),
        ("host = 1", "host: a table"),
    ] {
        let e = refused(text);
        assert!(
            e.starts_with(file) && e.contains(key),
            "{text}: {e} (want {key})"
        );
    }
    let e = refused("[host.\"x\"\n");
    assert!(
        e.starts_with(file),
        "a TOML syntax error names the file: {e}"
    );
}

#[test]
fn a_directory_without_hosts_file_is_read_as_certificates() {
    let dir = tempfile::tempdir().expect("tempdir");
    for f in ["ca.crt", "client.cert", "client.key", "notes.txt"] {
        std::fs::write(dir.path().join(f), "").expect("write");
    }
    let f = hosts_toml::cert_dir(dir.path()).expect("read");
    assert!(f.hosts.is_empty());
    assert_eq!(f.server.client.ca_files, [dir.path().join("ca.crt")]);
    assert_eq!(
        f.server.client.client_cert,
        Some((
            dir.path().join("client.cert"),
            Some(dir.path().join("client.key"))
        ))
    );
    std::fs::write(dir.path().join("other.cert"), "").expect("write");
    let e = hosts_toml::cert_dir(dir.path()).expect_err("two");
    assert!(
        e.to_string().contains("more than one client certificate"),
        "{e}"
    );
}

/// A config whose host directories are `root` only.
/// The URLs `hosts` tries for `domain`, each as its first attempt asks.
fn urls_of(hosts: &Hosts, domain: &str) -> Vec<String> {
    let eps = hosts.endpoints(domain, false).expect("endpoints");
    eps.iter()
        .map(|e| e.url(e.scheme == Scheme::Http, "x"))
        .collect()
}

fn config_with(root: &Path, extra: &str) -> RegistryConfig {
    let mut c = from_toml(extra);
    c.config_path = root.display().to_string();
    c
}

fn write(root: &Path, host_dir: &str, text: &str) {
    let d = root.join(host_dir);
    std::fs::create_dir_all(&d).expect("mkdir");
    std::fs::write(d.join("hosts.toml"), text).expect("write");
}

/// The host `dirs` finds for `host`: where it came from, and its first mirror's address.
fn first_mirror(dirs: &HostsDirs, host: &str) -> (PathBuf, String) {
    let found = dirs.lookup(host).expect("lookup").expect("found");
    let url = found.file.hosts[0].url.as_ref().expect("url");
    (found.dir.clone(), url.host.clone())
}

#[test]
fn a_host_directory_beats_default_and_is_read_again_when_it_changes() {
    let root = tempfile::tempdir().expect("tempdir");
    let dirs = HostsDirs::new(&root.path().display().to_string());
    assert!(dirs.lookup("r.example:5000").expect("none").is_none());
    let host = "r.example:5000";
    write(
        root.path(),
        "_default",
        "[host.\"http://default-mirror\"]\n",
    );
    let (dir, _) = first_mirror(&dirs, host);
    assert!(dir.ends_with("_default"));
    write(root.path(), host, "[host.\"http://own-mirror\"]\n");
    let (dir, mirror) = first_mirror(&dirs, host);
    assert!(dir.ends_with("r.example:5000"));
    assert_eq!(mirror, "own-mirror");
    // containerd's Windows-safe spelling wins over host:port.
    let underscored = "r.example_5000_";
    write(root.path(), underscored, "[host.\"http://underscored\"]\n");
    assert_eq!(first_mirror(&dirs, host).1, "underscored");
    // Edited in place: read again.
    write(
        root.path(),
        underscored,
        "[host.\"http://edited-mirror\"]\n",
    );
    assert_eq!(first_mirror(&dirs, host).1, "edited-mirror");
    write(root.path(), underscored, "bogus = 1\n");
    let e = dirs.lookup(host).expect_err("refused");
    assert!(e.to_string().contains("bogus: unknown key"), "{e}");
    assert!(HostsDirs::new("").is_empty());
}

#[test]
fn roots_are_searched_in_order_each_with_its_default() {
    let (a, b) = (
        tempfile::tempdir().expect("a"),
        tempfile::tempdir().expect("b"),
    );
    write(a.path(), "_default", "[host.\"http://a-default\"]\n");
    write(b.path(), "r.example", "[host.\"http://b-own\"]\n");
    let dirs = HostsDirs::new(&format!("{}:{}", a.path().display(), b.path().display()));
    let found = dirs.lookup("r.example").expect("lookup").expect("found");
    assert_eq!(
        found.file.hosts[0].url.as_ref().expect("url").host,
        "a-default"
    );
}

#[test]
fn bosun_config_wins_over_a_host_directory_which_wins_over_defaults() {
    let root = tempfile::tempdir().expect("tempdir");
    write(
        root.path(),
        "docker.io",
        "server = \"https://registry-1.docker.io\"\n[host.\"http://127.0.0.1:5001\"]\ncapabilities = [\"pull\", \"resolve\"]\n",
    );
    write(
        root.path(),
        "digests-only.example",
        "[host.\"https://cache.example\"]\ncapabilities = [\"pull\"]\n[host.\"https://push-only.example\"]\ncapabilities = [\"push\"]\n",
    );
    let c = config_with(root.path(), "");
    let hosts = Hosts::new(&c);
    let urls = urls_of(&hosts, "docker.io");
    assert_eq!(
        urls,
        [
            "http://127.0.0.1:5001/v2/x",
            "https://registry-1.docker.io/v2/x"
        ]
    );
    let eps = hosts.endpoints("docker.io", false).expect("eps");
    assert!(eps[0].mirror && !eps[1].mirror);
    // A pull-only host serves digests, never tags; a push-only host never serves pulls.
    let by_tag = hosts.endpoints("digests-only.example", false).expect("eps");
    assert_eq!(by_tag.len(), 1);
    assert_eq!(by_tag[0].host, "digests-only.example");
    let by_digest = hosts.endpoints("digests-only.example", true).expect("eps");
    assert_eq!(by_digest.len(), 2);
    assert_eq!(by_digest[0].host, "cache.example");
    // bosun's own table for the host wins.
    let c = config_with(
        root.path(),
        "[registry.hosts.\"docker.io\"]\nmirrors = [\"https://own.example\"]\n",
    );
    let eps = Hosts::new(&c).endpoints("docker.io", false).expect("eps");
    assert_eq!(eps[0].host, "own.example");
    assert_eq!(eps.len(), 2);
}

#[test]
fn a_pulls_own_settings_apply_on_top() {
    let root = tempfile::tempdir().expect("tempdir");
    let c = config_with(root.path(), "");
    let plain = Hosts::new(&c).for_pull(PullHosts {
        plain_http: true,
        skip_verify: true,
        ca_file: Some("/tmp/ca.pem".into()),
        ..Default::default()
    });
    let eps = plain.endpoints("kind-registry:5000", false).expect("eps");
    assert_eq!(eps[0].scheme, Scheme::Http);
    assert!(eps[0].client.skip_verify);
    assert_eq!(eps[0].client.ca_files, [PathBuf::from("/tmp/ca.pem")]);
    let default = Hosts::new(&c)
        .endpoints("kind-registry:5000", false)
        .expect("eps");
    assert_eq!(default[0].scheme, Scheme::Https);
    // --hosts-dir replaces config_path for the pull.
    let other = tempfile::tempdir().expect("tempdir");
    write(
        other.path(),
        "kind-registry:5000",
        "server = \"http://10.0.0.5:5000\"\n",
    );
    let eps = Hosts::new(&c)
        .for_pull(PullHosts {
            hosts_dir: Some(other.path().to_path_buf()),
            ..Default::default()
        })
        .endpoints("kind-registry:5000", false)
        .expect("eps");
    assert_eq!(eps[0].url(true, "x"), "http://10.0.0.5:5000/v2/x");
}
