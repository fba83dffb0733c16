//! An in-process [`Runtime`] on a temp root and state with the busybox test image imported:
//! for tests of domain APIs no RPC exposes (interactive sessions). The integration binary
//! itself serves as `bosun monitor`/`pinns`/`pod-init` (see main.rs). Dropping it kills and
//! removes everything the runtime created ([`super::cri::scrub`]).

use std::sync::Arc;

use anyhow::{Context, Result};
use bosun::config::Config;
use bosun::image::service::Images;
use bosun::oci::{ContainerRequest, NamespaceMode};
use bosun::runtime::{NewContainer, PodName, Runtime, SandboxRequest};

use super::network::TestNet;
use super::{images_dir, runc_bin, scratch};

/// The busybox test image's reference inside the fixture.
pub const BUSYBOX: &str = "bosun.test/busybox:latest";

/// A runtime owned by one test.
pub struct InProc {
    /// The runtime.
    pub rt: Arc<Runtime>,
    /// The pod network: the test's own bridge and subnet, no masquerade, no default route
    /// (never bosun's embedded default, which masquerades and keeps leases in /var/lib/cni).
    net: TestNet,
    dir: tempfile::TempDir,
}

impl InProc {
    /// Opens a runtime on a fresh scratch dir and imports busybox.
    pub async fn open() -> Result<InProc> {
        let dir = scratch()?;
        let runc = runc_bin().context("no runc")?;
        let name = dir.path().file_name().unwrap_or_default().to_string_lossy();
        let toml = format!(
            "socket = {:?}\nroot = {:?}\nstate = {:?}\nruntime = {:?}\ndefault_cgroup_parent = \"/{name}\"\n",
            dir.path().join("bosun.sock").display().to_string(),
            dir.path().join("root").display().to_string(),
            dir.path().join("state").display().to_string(),
            runc.display().to_string(),
        );
        let net = TestNet::new(dir.path())?;
        let toml = net.merge_into(&toml);
        let config = Arc::new(Config::parse(&toml)?);
        let images = Images::open(&config)?;
        let archive = images_dir().join("busybox.oci.tar");
        bosun::image::import::import_file(
            &images,
            &archive,
            bosun::image::import::Naming::Bosun {
                base_name: None,
                tags: vec![BUSYBOX.to_string()],
            },
        )
        .await
        .with_context(|| format!("import {}", archive.display()))?;
        let rt = Runtime::open(config, images).await?;
        Ok(InProc { rt, net, dir })
    }

    /// Runs a sandbox named `name` (own network namespace unless `host_network`).
    pub async fn sandbox(&self, name: &str, host_network: bool) -> Result<String> {
        let name = super::cri::unique(name);
        let req = SandboxRequest {
            pod: PodName {
                name: name.clone(),
                namespace: super::cri::NAMESPACE.into(),
                uid: format!("uid-{name}"),
                attempt: 0,
            },
            hostname: name.clone(),
            log_directory: self
                .dir
                .path()
                .join("logs")
                .join(&name)
                .display()
                .to_string(),
            network: if host_network {
                NamespaceMode::Node
            } else {
                NamespaceMode::Pod
            },
            pid: NamespaceMode::Container,
            ..Default::default()
        };
        Ok(self.rt.run_sandbox(req).await?)
    }

    /// Creates and starts a busybox container running `sh -c script` in `sandbox`.
    pub async fn container(
        &self,
        sandbox: &str,
        name: &str,
        script: &str,
        edit: impl FnOnce(&mut ContainerRequest),
    ) -> Result<String> {
        let mut request = ContainerRequest {
            name: name.into(),
            image: BUSYBOX.into(),
            command: vec!["sh".into(), "-c".into(), script.into()],
            ..Default::default()
        };
        request.linux.security.namespaces.pid = NamespaceMode::Container;
        edit(&mut request);
        let id = self
            .rt
            .create_container(
                sandbox,
                NewContainer {
                    attempt: 0,
                    log_path: format!("{name}.log"),
                    request,
                },
            )
            .await?;
        self.rt.start_container(&id).await?;
        Ok(id)
    }

    /// The CRI log file of container `name` in `sandbox`.
    pub fn log_of(&self, sandbox: &str, name: &str) -> Result<std::path::PathBuf> {
        let sb = self.rt.sandbox(sandbox)?;
        Ok(std::path::Path::new(&sb.meta().request.log_directory).join(format!("{name}.log")))
    }

    /// Stops and removes every sandbox (best effort; Drop scrubs whatever is left).
    pub async fn cleanup(&self) {
        for sb in self.rt.list_sandboxes(&Default::default()) {
            let id = sb.id().to_string();
            let _ = self.rt.stop_sandbox(&id).await;
            let _ = self.rt.remove_sandbox(&id).await;
        }
    }
}

impl Drop for InProc {
    fn drop(&mut self) {
        let name = self.dir.path().file_name().unwrap_or_default();
        let parent = format!("/{}", name.to_string_lossy());
        let state = self.dir.path().join("state");
        super::cri::scrub(self.dir.path(), &state, &parent);
        self.net.cleanup();
    }
}
