//! LinuxContainerSecurityContext → `oci::Security`, including the deprecated profile strings.

use super::bad_enum;
use super::sandbox::{namespace_mode, userns};
use crate::error::{echo, Error, Result};
use crate::oci::{
    CapabilityEdits, NamespaceOptions, Security, SecurityProfile, SupplementalGroupsPolicy,
};
use crate::proto::runtime::v1 as pb;

/// The deprecated profile-string prefix naming a host profile.
const LOCALHOST_PREFIX: &str = "localhost/";

/// The container's security context; `container` names it in errors. Capability names are
/// passed through as given: the spec builder (`oci::caps::resolve`) accepts `NET_ADMIN`,
/// `CAP_NET_ADMIN` in any case and refuses unknown names with InvalidArgument naming them.
#[allow(deprecated)] // the deprecated profile strings are still honoured when the messages are unset
pub fn security(
    container: &str,
    sc: Option<pb::LinuxContainerSecurityContext>,
) -> Result<Security> {
    let Some(sc) = sc else {
        return Ok(Security::default());
    };
    let object = format!("container config {:?}: security_context", echo(container));
    let caps = sc.capabilities.unwrap_or_default();
    let ns = sc.namespace_options.unwrap_or_default();
    let user = userns(&object, ns.userns_options)?;
    let field = |f: &str| format!("{object}.namespace_options.{f}");
    let policy = match pb::SupplementalGroupsPolicy::try_from(sc.supplemental_groups_policy) {
        Ok(pb::SupplementalGroupsPolicy::Merge) => SupplementalGroupsPolicy::Merge,
        Ok(pb::SupplementalGroupsPolicy::Strict) => SupplementalGroupsPolicy::Strict,
        Err(_) => {
            return Err(bad_enum(
                &format!("{object}.supplemental_groups_policy"),
                sc.supplemental_groups_policy,
            ))
        }
    };
    Ok(Security {
        capabilities: CapabilityEdits {
            add: caps.add_capabilities,
            drop: caps.drop_capabilities,
            add_ambient: caps.add_ambient_capabilities,
        },
        privileged: sc.privileged,
        namespaces: NamespaceOptions {
            network: namespace_mode(&field("network"), ns.network)?,
            pid: namespace_mode(&field("pid"), ns.pid)?,
            ipc: namespace_mode(&field("ipc"), ns.ipc)?,
            target_id: ns.target_id,
            user,
        },
        run_as_user: sc.run_as_user.map(|v| v.value),
        run_as_group: sc.run_as_group.map(|v| v.value),
        run_as_username: (!sc.run_as_username.is_empty()).then_some(sc.run_as_username),
        readonly_rootfs: sc.readonly_rootfs,
        supplemental_groups: sc.supplemental_groups,
        supplemental_groups_policy: policy,
        no_new_privs: sc.no_new_privs,
        masked_paths: paths(sc.masked_paths),
        readonly_paths: paths(sc.readonly_paths),
        seccomp: seccomp(&object, sc.seccomp, &sc.seccomp_profile_path)?,
        apparmor: apparmor(&object, sc.apparmor, &sc.apparmor_profile)?,
    })
}

/// proto3 cannot tell an empty list from an unset one: empty means "the defaults" (`None`).
fn paths(list: Vec<String>) -> Option<Vec<String>> {
    (!list.is_empty()).then_some(list)
}

/// A SecurityProfile message; `field` names it in errors.
fn profile(field: &str, p: pb::SecurityProfile) -> Result<SecurityProfile> {
    use pb::security_profile::ProfileType;
    match ProfileType::try_from(p.profile_type) {
        Ok(ProfileType::RuntimeDefault) => Ok(SecurityProfile::RuntimeDefault),
        Ok(ProfileType::Unconfined) => Ok(SecurityProfile::Unconfined),
        Ok(ProfileType::Localhost) if p.localhost_ref.is_empty() => Err(Error::invalid(format!(
            "{field}: localhost_ref is required for a Localhost profile"
        ))),
        Ok(ProfileType::Localhost) => Ok(SecurityProfile::Localhost(p.localhost_ref)),
        Err(_) => Err(bad_enum(&format!("{field}.profile_type"), p.profile_type)),
    }
}

/// A deprecated `localhost/<ref>` string; `None` when `s` has no such prefix.
fn localhost(field: &str, s: &str) -> Option<Result<SecurityProfile>> {
    let r = s.strip_prefix(LOCALHOST_PREFIX)?;
    Some(if r.is_empty() {
        Err(Error::invalid(format!(
            "{field}: {:?} names no profile",
            echo(s)
        )))
    } else {
        Ok(SecurityProfile::Localhost(r.to_string()))
    })
}

/// Seccomp: the `seccomp` message wins; else the deprecated path, where "" and `unconfined`
/// mean Unconfined (CRI: unset is unconfined), `runtime/default` and `docker/default` the
/// runtime's profile and `localhost/<path>` a host file.
pub fn seccomp(
    object: &str,
    p: Option<pb::SecurityProfile>,
    deprecated: &str,
) -> Result<SecurityProfile> {
    let field = format!("{object}.seccomp");
    if let Some(p) = p {
        return profile(&field, p);
    }
    let field = format!("{object}.seccomp_profile_path");
    match deprecated {
        "" | "unconfined" => Ok(SecurityProfile::Unconfined),
        "runtime/default" | "docker/default" => Ok(SecurityProfile::RuntimeDefault),
        s => localhost(&field, s).unwrap_or_else(|| {
            Err(Error::invalid(format!(
                "{field}: unknown profile {:?}",
                echo(s)
            )))
        }),
    }
}

/// AppArmor: the `apparmor` message wins; else the deprecated name, where "" and
/// `runtime/default` mean the runtime's profile (containerd's default since kubernetes#51746),
/// `unconfined` none and `localhost/<name>` a loaded profile.
pub fn apparmor(
    object: &str,
    p: Option<pb::SecurityProfile>,
    deprecated: &str,
) -> Result<SecurityProfile> {
    let field = format!("{object}.apparmor");
    if let Some(p) = p {
        return profile(&field, p);
    }
    let field = format!("{object}.apparmor_profile");
    match deprecated {
        "" | "runtime/default" => Ok(SecurityProfile::RuntimeDefault),
        "unconfined" => Ok(SecurityProfile::Unconfined),
        s => localhost(&field, s).unwrap_or_else(|| {
            Err(Error::invalid(format!(
                "{field}: unknown profile {:?}",
                echo(s)
            )))
        }),
    }
}
