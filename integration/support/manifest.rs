//! Typed Pod manifests for supervised-pod tests: a [`PodManifest`] of [`ContainerManifest`]s
//! with [`ProbeManifest`]s, built from Kubernetes' own types and written out as the YAML
//! `bosun pod apply` reads. Every option is one call; `spec`/`with` reach any other field.
//! A test whose point is the YAML text itself (YAML 1.1 modes, a malformed document) keeps
//! its text.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as k;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::pods::BUSYBOX;

/// A Pod manifest under construction; see [`PodManifest::new`].
#[derive(Debug, Clone)]
pub struct PodManifest(k::Pod);

impl PodManifest {
    /// A Pod named `name` (namespace default) without containers yet.
    pub fn new(name: &str) -> PodManifest {
        let mut pod = k::Pod::default();
        pod.metadata.name = Some(name.into());
        pod.spec = Some(k::PodSpec::default());
        PodManifest(pod)
    }

    /// A label.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    /// terminationGracePeriodSeconds.
    pub fn grace(self, secs: i64) -> Self {
        self.spec(|s| s.termination_grace_period_seconds = Some(secs))
    }

    /// restartPolicy (`Always`, `OnFailure`, `Never`).
    pub fn restart_policy(self, policy: &str) -> Self {
        self.spec(|s| s.restart_policy = Some(policy.into()))
    }

    /// One more container.
    pub fn container(self, c: ContainerManifest) -> Self {
        self.spec(|s| s.containers.push(c.0))
    }

    /// One more init container (a sidecar when its restartPolicy is `Always`).
    pub fn init_container(self, c: ContainerManifest) -> Self {
        self.spec(|s| s.init_containers.get_or_insert_with(Vec::new).push(c.0))
    }

    /// A volume `name`: an emptyDir.
    pub fn empty_dir(self, name: &str) -> Self {
        self.volume(k::Volume {
            name: name.into(),
            empty_dir: Some(k::EmptyDirVolumeSource::default()),
            ..Default::default()
        })
    }

    /// A volume `name`: the host's `path`, of hostPath `type` when given (`Directory`, …).
    pub fn host_path(self, name: &str, path: &str, type_: Option<&str>) -> Self {
        self.volume(k::Volume {
            name: name.into(),
            host_path: Some(k::HostPathVolumeSource {
                path: path.into(),
                type_: type_.map(str::to_string),
            }),
            ..Default::default()
        })
    }

    /// One more volume.
    pub fn volume(self, v: k::Volume) -> Self {
        self.spec(|s| s.volumes.get_or_insert_with(Vec::new).push(v))
    }

    /// Any other change to the pod spec.
    pub fn spec(mut self, edit: impl FnOnce(&mut k::PodSpec)) -> Self {
        edit(self.0.spec.get_or_insert_with(Default::default));
        self
    }

    /// The manifest as `bosun pod apply` reads it.
    pub fn yaml(&self) -> String {
        serde_yaml_ng::to_string(&self.0).unwrap_or_else(|e| format!("# not YAML: {e}"))
    }
}

/// A container of a [`PodManifest`]; see [`ContainerManifest::new`] and [`busybox`].
#[derive(Debug, Clone)]
pub struct ContainerManifest(k::Container);

/// A container `name` of the busybox test image (imagePullPolicy Never: it is imported).
pub fn busybox(name: &str) -> ContainerManifest {
    ContainerManifest::new(name, BUSYBOX)
}

impl ContainerManifest {
    /// A container `name` of `image`, imagePullPolicy Never (test images are imported).
    pub fn new(name: &str, image: &str) -> ContainerManifest {
        ContainerManifest(k::Container {
            name: name.into(),
            image: Some(image.into()),
            image_pull_policy: Some("Never".into()),
            ..Default::default()
        })
    }

    /// Runs `sh -c script`.
    pub fn sh(self, script: &str) -> Self {
        self.command(&["sh", "-c", script])
    }

    /// The command.
    pub fn command(mut self, argv: &[&str]) -> Self {
        self.0.command = Some(argv.iter().map(|a| a.to_string()).collect());
        self
    }

    /// The arguments.
    pub fn args(mut self, args: &[&str]) -> Self {
        self.0.args = Some(args.iter().map(|a| a.to_string()).collect());
        self
    }

    /// restartPolicy of an init container: `Always` makes it a sidecar.
    pub fn restart_policy(mut self, policy: &str) -> Self {
        self.0.restart_policy = Some(policy.into());
        self
    }

    /// Mounts volume `name` at `path`.
    pub fn mount(mut self, name: &str, path: &str) -> Self {
        self.0
            .volume_mounts
            .get_or_insert_with(Vec::new)
            .push(k::VolumeMount {
                name: name.into(),
                mount_path: path.into(),
                ..Default::default()
            });
        self
    }

    /// The readiness probe.
    pub fn readiness(mut self, p: ProbeManifest) -> Self {
        self.0.readiness_probe = Some(p.0);
        self
    }

    /// The liveness probe.
    pub fn liveness(mut self, p: ProbeManifest) -> Self {
        self.0.liveness_probe = Some(p.0);
        self
    }

    /// The startup probe.
    pub fn startup(mut self, p: ProbeManifest) -> Self {
        self.0.startup_probe = Some(p.0);
        self
    }

    /// A preStop exec hook running `sh -c script`.
    pub fn pre_stop(mut self, script: &str) -> Self {
        self.0
            .lifecycle
            .get_or_insert_with(Default::default)
            .pre_stop = Some(sh_handler(script));
        self
    }

    /// A postStart exec hook running `sh -c script`.
    pub fn post_start(mut self, script: &str) -> Self {
        self.0
            .lifecycle
            .get_or_insert_with(Default::default)
            .post_start = Some(sh_handler(script));
        self
    }

    /// Resource requests and limits, e.g. `&[("cpu", "100m")]`.
    pub fn resources(mut self, requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Self {
        let quantities = |pairs: &[(&str, &str)]| {
            (!pairs.is_empty()).then(|| {
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect()
            })
        };
        self.0.resources = Some(k::ResourceRequirements {
            requests: quantities(requests),
            limits: quantities(limits),
            ..Default::default()
        });
        self
    }

    /// Any other change to the container.
    pub fn with(mut self, edit: impl FnOnce(&mut k::Container)) -> Self {
        edit(&mut self.0);
        self
    }
}

/// An exec handler running `sh -c script`.
fn sh_handler(script: &str) -> k::LifecycleHandler {
    k::LifecycleHandler {
        exec: Some(k::ExecAction {
            command: Some(vec!["sh".into(), "-c".into(), script.into()]),
        }),
        ..Default::default()
    }
}

/// A probe of a [`ContainerManifest`]: one of the four kinds, then its timing.
#[derive(Debug, Clone)]
pub struct ProbeManifest(k::Probe);

impl ProbeManifest {
    /// Runs `argv` in the container.
    pub fn exec(argv: &[&str]) -> ProbeManifest {
        ProbeManifest(k::Probe {
            exec: Some(k::ExecAction {
                command: Some(argv.iter().map(|a| a.to_string()).collect()),
            }),
            ..Default::default()
        })
    }

    /// An HTTP GET of `path` on `port` (a number, or a container port's name).
    pub fn http(path: &str, port: impl Into<Port>) -> ProbeManifest {
        ProbeManifest(k::Probe {
            http_get: Some(k::HTTPGetAction {
                path: Some(path.into()),
                port: port.into().0,
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    /// A TCP connect to `port`.
    pub fn tcp(port: impl Into<Port>) -> ProbeManifest {
        ProbeManifest(k::Probe {
            tcp_socket: Some(k::TCPSocketAction {
                port: port.into().0,
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    /// A gRPC health check on `port`, of `service` when given.
    pub fn grpc(port: i32, service: Option<&str>) -> ProbeManifest {
        ProbeManifest(k::Probe {
            grpc: Some(k::GRPCAction {
                port,
                service: service.map(str::to_string),
            }),
            ..Default::default()
        })
    }

    /// periodSeconds.
    pub fn period(mut self, secs: i32) -> Self {
        self.0.period_seconds = Some(secs);
        self
    }

    /// timeoutSeconds.
    pub fn timeout(mut self, secs: i32) -> Self {
        self.0.timeout_seconds = Some(secs);
        self
    }

    /// failureThreshold.
    pub fn failures(mut self, n: i32) -> Self {
        self.0.failure_threshold = Some(n);
        self
    }

    /// The probe's own terminationGracePeriodSeconds.
    pub fn grace(mut self, secs: i64) -> Self {
        self.0.termination_grace_period_seconds = Some(secs);
        self
    }

    /// Any other change to the probe.
    pub fn with(mut self, edit: impl FnOnce(&mut k::Probe)) -> Self {
        edit(&mut self.0);
        self
    }
}

/// A probe's port: a number or a container port's name.
pub struct Port(IntOrString);

impl From<i32> for Port {
    fn from(n: i32) -> Port {
        Port(IntOrString::Int(n))
    }
}

impl From<&str> for Port {
    fn from(name: &str) -> Port {
        Port(IntOrString::String(name.into()))
    }
}
