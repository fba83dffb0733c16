//! CreateContainer: ContainerConfig → NewContainer (mounts, devices, envs), and mounts back.

use std::path::Path;

use super::bad_enum;
use super::resources::resources;
use super::sandbox::{id_mappings, id_mappings_to_proto, sorted};
use super::security::security;
use super::signal::stop_signal;
use crate::error::{echo, Error, Result};
use crate::oci::{ContainerRequest, DeviceRequest, LinuxRequest, MountRequest, Propagation};
use crate::proto::runtime::v1 as pb;
use crate::runtime::NewContainer;

/// Converts a CreateContainer request's config, validating what CRI requires: metadata with a
/// name, an image, absolute mount paths. The request's `sandbox_config` is not needed: the
/// runtime uses the configuration it recorded when the sandbox was run.
pub fn new_container(config: Option<pb::ContainerConfig>) -> Result<NewContainer> {
    let c = config.ok_or_else(|| Error::invalid("container config is required"))?;
    let meta = c
        .metadata
        .ok_or_else(|| Error::invalid("container config: metadata is required"))?;
    if meta.name.is_empty() {
        return Err(Error::invalid(
            "container config: metadata.name is required",
        ));
    }
    let name = meta.name;
    let object = format!("container config {:?}", echo(&name));
    let image = c.image.map(|i| i.image).unwrap_or_default();
    if image.trim().is_empty() {
        return Err(Error::invalid(format!("{object}: image.image is required")));
    }
    if let Some(d) = c.cdi_devices.first() {
        return Err(Error::invalid(format!(
            "{object}: CDI_devices ({:?}): CDI devices are not supported",
            echo(&d.name)
        )));
    }
    let linux = c.linux.unwrap_or_default();
    let request = ContainerRequest {
        image,
        command: c.command,
        args: c.args,
        working_dir: (!c.working_dir.is_empty()).then_some(c.working_dir),
        envs: c.envs.into_iter().map(|kv| (kv.key, kv.value)).collect(),
        mounts: c
            .mounts
            .into_iter()
            .enumerate()
            .map(|(i, m)| mount(&object, i, m))
            .collect::<Result<_>>()?,
        devices: c
            .devices
            .into_iter()
            .map(|d| DeviceRequest {
                container_path: d.container_path,
                host_path: d.host_path,
                permissions: d.permissions,
            })
            .collect(),
        tty: c.tty,
        stdin: c.stdin,
        stdin_once: c.stdin_once,
        labels: sorted(c.labels),
        annotations: sorted(c.annotations),
        linux: LinuxRequest {
            resources: resources(linux.resources.unwrap_or_default())
                .map_err(|e| e.context(&object))?,
            security: security(&name, linux.security_context)?,
        },
        stop_signal: stop_signal(c.stop_signal)?,
        name,
    };
    Ok(NewContainer {
        attempt: meta.attempt,
        log_path: c.log_path,
        request,
    })
}

/// One Mount: `container_path` absolute; `host_path` absolute unless the mount is an image
/// volume (carried in `image` so the runtime can refuse it with its own message).
fn mount(object: &str, i: usize, m: pb::Mount) -> Result<MountRequest> {
    let field = |f: &str| format!("{object}: mounts[{i}].{f}");
    if !Path::new(&m.container_path).is_absolute() {
        return Err(Error::invalid(format!(
            "{}: {:?} must be an absolute path",
            field("container_path"),
            echo(&m.container_path)
        )));
    }
    let image = m.image.map(|i| i.image).filter(|i| !i.is_empty());
    if image.is_none() && !Path::new(&m.host_path).is_absolute() {
        return Err(Error::invalid(format!(
            "{}: {:?} must be a non-empty absolute path",
            field("host_path"),
            echo(&m.host_path)
        )));
    }
    let propagation = match pb::MountPropagation::try_from(m.propagation) {
        Ok(pb::MountPropagation::PropagationPrivate) => Propagation::Private,
        Ok(pb::MountPropagation::PropagationHostToContainer) => Propagation::HostToContainer,
        Ok(pb::MountPropagation::PropagationBidirectional) => Propagation::Bidirectional,
        Err(_) => return Err(bad_enum(&field("propagation"), m.propagation)),
    };
    Ok(MountRequest {
        container_path: m.container_path,
        host_path: m.host_path,
        readonly: m.readonly,
        propagation,
        selinux_relabel: m.selinux_relabel,
        recursive_read_only: m.recursive_read_only,
        image,
        uid_mappings: id_mappings(m.uid_mappings),
        gid_mappings: id_mappings(m.gid_mappings),
    })
}

/// A mount as it was requested (ContainerStatus.mounts).
pub fn mount_to_proto(m: &MountRequest) -> pb::Mount {
    let propagation = match m.propagation {
        Propagation::Private => pb::MountPropagation::PropagationPrivate,
        Propagation::HostToContainer => pb::MountPropagation::PropagationHostToContainer,
        Propagation::Bidirectional => pb::MountPropagation::PropagationBidirectional,
    };
    pb::Mount {
        container_path: m.container_path.clone(),
        host_path: m.host_path.clone(),
        readonly: m.readonly,
        selinux_relabel: m.selinux_relabel,
        propagation: propagation as i32,
        recursive_read_only: m.recursive_read_only,
        image: m.image.as_ref().map(|i| pb::ImageSpec {
            image: i.clone(),
            ..Default::default()
        }),
        uid_mappings: id_mappings_to_proto(&m.uid_mappings),
        gid_mappings: id_mappings_to_proto(&m.gid_mappings),
        ..Default::default()
    }
}
