//! Debian's docker-registry on 127.0.0.1 with its own storage, optional htpasswd; killed on drop.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context};

use super::{images_dir, repo_root, scratch, wait_until};

/// Debian's registry binary.
pub const REGISTRY_BIN: &str = "/usr/bin/docker-registry";
/// Credentials of registries started with auth.
pub const USER: (&str, &str) = ("bosun", "s3cret-pass");

/// A registry owned by one test.
pub struct Registry {
    dir: tempfile::TempDir,
    child: Child,
    port: u16,
    auth: bool,
    tls: bool,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Registry {
    /// Starts a registry; with `auth`, basic auth via htpasswd (bcrypt) is required.
    pub fn start(auth: bool) -> anyhow::Result<Registry> {
        Self::start_with(auth, false)
    }

    /// Starts a registry serving HTTPS with a certificate for 127.0.0.1 signed by a throwaway CA
    /// (see [`Registry::ca_file`]).
    pub fn start_tls() -> anyhow::Result<Registry> {
        Self::start_with(false, true)
    }

    /// The PEM CA that signed a TLS registry's certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    fn start_with(auth: bool, tls: bool) -> anyhow::Result<Registry> {
        let dir = scratch()?;
        let port = free_port()?;
        let mut cfg = format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n  secret: bosun-test\n",
            dir.path().join("data").display()
        );
        if auth {
            let out = Command::new("htpasswd")
                .args(["-Bbn", USER.0, USER.1])
                .output()
                .context("htpasswd")?;
            if !out.status.success() {
                bail!("htpasswd failed: {}", String::from_utf8_lossy(&out.stderr));
            }
            std::fs::write(dir.path().join("htpasswd"), out.stdout)?;
            cfg.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: bosun-test\n    path: {}\n",
                dir.path().join("htpasswd").display()
            ));
        }
        if tls {
            make_certs(dir.path())?;
            cfg.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                dir.path().join("server.pem").display(),
                dir.path().join("server.key").display()
            ));
        }
        std::fs::write(dir.path().join("config.yml"), cfg)?;
        let child = Command::new(REGISTRY_BIN)
            .arg("serve")
            .arg(dir.path().join("config.yml"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("registry.log"))?)
            .spawn()
            .context("spawn docker-registry")?;
        let r = Registry {
            dir,
            child,
            port,
            auth,
            tls,
        };
        if !wait_until(15, || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        }) {
            bail!("registry did not come up on port {port}");
        }
        Ok(r)
    }

    /// `127.0.0.1:PORT`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:PORT/bosun/NAME:latest`.
    pub fn image(&self, name: &str) -> String {
        format!("{}/bosun/{name}:latest", self.host())
    }

    /// Pushes test images (all when `only` is empty) with hack/testimages.py (over HTTPS
    /// trusting [`Registry::ca_file`] for a TLS registry).
    pub fn push(&self, only: &[&str]) -> anyhow::Result<()> {
        let mut cmd = Command::new("python3");
        cmd.arg(repo_root().join("hack/testimages.py"))
            .args(["push", "--dir"])
            .arg(images_dir())
            .args(["--registry", &self.host()]);
        if !only.is_empty() {
            cmd.args(["--only", &only.join(",")]);
        }
        if self.auth {
            cmd.args(["--user", USER.0, "--password", USER.1]);
        }
        if self.tls {
            cmd.arg("--tls-ca").arg(self.ca_file());
        }
        let out = cmd.output().context("run hack/testimages.py push")?;
        if !out.status.success() {
            bail!(
                "push failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// Where the registry stores blob `digest` (for tampering tests).
    pub fn blob_path(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.dir
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

/// A CA and a server certificate for IP 127.0.0.1, made with the openssl CLI.
fn make_certs(dir: &std::path::Path) -> anyhow::Result<()> {
    let run = |args: &[&str]| -> anyhow::Result<()> {
        let out = Command::new("openssl")
            .current_dir(dir)
            .args(args)
            .output()
            .context("openssl")?;
        if !out.status.success() {
            bail!("openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    };
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n")?;
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=bosun-test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ])?;
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ])?;
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "san.ext",
        "-out",
        "server.pem",
    ])?;
    Ok(())
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
