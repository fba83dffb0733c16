//! Typed builders for the two configs a CRI test sends: [`PodBuilder`] for RunPodSandbox and
//! [`ContainerBuilder`] for CreateContainer. Each starts from what the kubelet sends for an
//! ordinary pod or container and adds one option per call (containerd's `WithPodHostname`,
//! `WithCommand`, … in builder form); `with` reaches any field no option names. Both deref to
//! the protobuf config, so they go wherever a `&pb::PodSandboxConfig` or
//! `&pb::ContainerConfig` does.

use std::ops::Deref;

use bosun::proto::runtime::v1 as pb;

use super::{map, namespaces, unique, Pod, NAMESPACE};
use crate::support::Daemon;

/// `labels`, `annotations` and `attempt`, the same three fields in both configs.
macro_rules! metadata_setters {
    ($what:literal, $attempt:literal) => {
        #[doc = concat!("The ", $what, "'s labels.")]
        pub fn labels(mut self, pairs: &[(&str, &str)]) -> Self {
            self.0.labels = map(pairs);
            self
        }

        #[doc = concat!("The ", $what, "'s annotations.")]
        pub fn annotations(mut self, pairs: &[(&str, &str)]) -> Self {
            self.0.annotations = map(pairs);
            self
        }

        #[doc = concat!("The metadata's attempt (", $attempt, ").")]
        pub fn attempt(mut self, attempt: u32) -> Self {
            if let Some(m) = self.0.metadata.as_mut() {
                m.attempt = attempt;
            }
            self
        }
    };
}

/// A RunPodSandbox config under construction; see [`PodBuilder::new`].
#[derive(Debug, Clone)]
pub struct PodBuilder(pb::PodSandboxConfig);

impl PodBuilder {
    /// A pod config like the kubelet's, unique per call: name `<name>-<pid>-<n>` (see
    /// [`unique`]) also its hostname, uid `uid-<name>`, namespace [`NAMESPACE`], log directory
    /// in the test's scratch dir, the test's cgroup parent, own network and IPC, one pid
    /// namespace per container.
    pub fn new(d: &Daemon, name: &str) -> PodBuilder {
        let name = unique(name);
        PodBuilder(pb::PodSandboxConfig {
            metadata: Some(pb::PodSandboxMetadata {
                name: name.clone(),
                uid: format!("uid-{name}"),
                namespace: NAMESPACE.into(),
                attempt: 0,
            }),
            hostname: name.clone(),
            log_directory: d.dir().join("logs").join(&name).display().to_string(),
            linux: Some(pb::LinuxPodSandboxConfig {
                cgroup_parent: d.cgroup_parent(),
                security_context: Some(pb::LinuxSandboxSecurityContext {
                    namespace_options: Some(namespaces(pb::NamespaceMode::Container)),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    /// The pod's hostname.
    pub fn hostname(mut self, hostname: &str) -> Self {
        self.0.hostname = hostname.into();
        self
    }

    metadata_setters!("pod", "the kubelet's next try at the same pod");

    /// One pid namespace for the whole pod (shareProcessNamespace: a pod init is PID 1).
    pub fn share_pid(mut self) -> Self {
        self.namespace_options().pid = pb::NamespaceMode::Pod as i32;
        self
    }

    /// The pod's namespace options, whole.
    pub fn namespaces(mut self, options: pb::NamespaceOption) -> Self {
        *self.namespace_options() = options;
        self
    }

    /// The node's network namespace (hostNetwork).
    pub fn host_network(mut self) -> Self {
        self.namespace_options().network = pb::NamespaceMode::Node as i32;
        self
    }

    /// The pod's own user namespace as `options` say.
    pub fn userns(mut self, options: pb::UserNamespace) -> Self {
        self.namespace_options().userns_options = Some(options);
        self
    }

    /// The pod's sysctls.
    pub fn sysctls(mut self, pairs: &[(&str, &str)]) -> Self {
        self.0.linux.get_or_insert_with(Default::default).sysctls = map(pairs);
        self
    }

    /// The pod's port mappings.
    pub fn ports(mut self, mappings: Vec<pb::PortMapping>) -> Self {
        self.0.port_mappings = mappings;
        self
    }

    /// The pod's DNS config (resolv.conf's nameservers, search domains and options).
    pub fn dns(mut self, servers: &[&str], searches: &[&str], options: &[&str]) -> Self {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        self.0.dns_config = Some(pb::DnsConfig {
            servers: strings(servers),
            searches: strings(searches),
            options: strings(options),
        });
        self
    }

    /// Any other change to the config.
    pub fn with(mut self, edit: impl FnOnce(&mut pb::PodSandboxConfig)) -> Self {
        edit(&mut self.0);
        self
    }

    /// The config.
    pub fn build(self) -> pb::PodSandboxConfig {
        self.0
    }

    fn namespace_options(&mut self) -> &mut pb::NamespaceOption {
        self.0
            .linux
            .get_or_insert_with(Default::default)
            .security_context
            .get_or_insert_with(Default::default)
            .namespace_options
            .get_or_insert_with(Default::default)
    }
}

impl Deref for PodBuilder {
    type Target = pb::PodSandboxConfig;
    fn deref(&self) -> &pb::PodSandboxConfig {
        &self.0
    }
}

impl From<PodBuilder> for pb::PodSandboxConfig {
    fn from(b: PodBuilder) -> pb::PodSandboxConfig {
        b.0
    }
}

/// A CreateContainer config under construction; see [`ContainerBuilder::new`].
#[derive(Debug, Clone)]
pub struct ContainerBuilder(pb::ContainerConfig);

impl ContainerBuilder {
    /// A container config like the kubelet's: metadata `name`, `image`, log path `<name>.log`
    /// (relative to the pod's log directory), the pod's namespace options, the image's
    /// command.
    pub fn new(pod: &Pod, name: &str, image: &str) -> ContainerBuilder {
        let ns = pod
            .config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.clone());
        ContainerBuilder(pb::ContainerConfig {
            metadata: Some(pb::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            image: Some(pb::ImageSpec {
                image: image.into(),
                ..Default::default()
            }),
            log_path: format!("{name}.log"),
            linux: Some(pb::LinuxContainerConfig {
                resources: None,
                security_context: Some(pb::LinuxContainerSecurityContext {
                    namespace_options: ns,
                    ..Default::default()
                }),
            }),
            ..Default::default()
        })
    }

    /// Runs `sh -c script` (the command; the image's arguments are dropped).
    pub fn sh(self, script: &str) -> Self {
        self.command(&["sh", "-c", script])
    }

    /// The command (replaces the image's ENTRYPOINT).
    pub fn command(mut self, argv: &[&str]) -> Self {
        self.0.command = argv.iter().map(|a| a.to_string()).collect();
        self
    }

    /// The arguments (replace the image's CMD).
    pub fn args(mut self, args: &[&str]) -> Self {
        self.0.args = args.iter().map(|a| a.to_string()).collect();
        self
    }

    /// One more environment variable.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.0.envs.push(super::env(key, value));
        self
    }

    /// The working directory.
    pub fn working_dir(mut self, dir: &str) -> Self {
        self.0.working_dir = dir.into();
        self
    }

    metadata_setters!("container", "the kubelet's restart count");

    /// One more mount.
    pub fn mount(mut self, mount: pb::Mount) -> Self {
        self.0.mounts.push(mount);
        self
    }

    /// The signal StopContainer sends first.
    pub fn stop_signal(mut self, signal: pb::Signal) -> Self {
        self.0.stop_signal = signal as i32;
        self
    }

    /// A terminal.
    pub fn tty(mut self) -> Self {
        self.0.tty = true;
        self
    }

    /// A change to the container's security context.
    pub fn security(mut self, edit: impl FnOnce(&mut pb::LinuxContainerSecurityContext)) -> Self {
        edit(super::security(&mut self.0));
        self
    }

    /// A change to the container's resources.
    pub fn resources(mut self, edit: impl FnOnce(&mut pb::LinuxContainerResources)) -> Self {
        edit(super::resources(&mut self.0));
        self
    }

    /// Any other change to the config.
    pub fn with(mut self, edit: impl FnOnce(&mut pb::ContainerConfig)) -> Self {
        edit(&mut self.0);
        self
    }

    /// The config.
    pub fn build(self) -> pb::ContainerConfig {
        self.0
    }
}

impl Deref for ContainerBuilder {
    type Target = pb::ContainerConfig;
    fn deref(&self) -> &pb::ContainerConfig {
        &self.0
    }
}

impl From<ContainerBuilder> for pb::ContainerConfig {
    fn from(b: ContainerBuilder) -> pb::ContainerConfig {
        b.0
    }
}

impl Pod {
    /// A container config for this pod (see [`ContainerBuilder::new`]).
    pub fn container(&self, name: &str, image: &str) -> ContainerBuilder {
        ContainerBuilder::new(self, name, image)
    }
}
