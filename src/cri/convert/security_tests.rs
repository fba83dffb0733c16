//! Tests of the container security context: profiles (incl. deprecated strings), users, paths.
#![allow(deprecated)] // the deprecated profile strings are part of what is tested

use super::assert_invalid;
use super::security::*;
use crate::oci::{NamespaceMode, SecurityProfile, SupplementalGroupsPolicy};
use crate::proto::runtime::v1 as pb;
use pb::security_profile::ProfileType;

fn profile(t: ProfileType, r: &str) -> Option<pb::SecurityProfile> {
    Some(pb::SecurityProfile {
        profile_type: t as i32,
        localhost_ref: r.into(),
    })
}

#[test]
fn seccomp_profiles_and_deprecated_paths() {
    use SecurityProfile::*;
    let table = [
        (None, "", Unconfined),
        (None, "unconfined", Unconfined),
        (None, "runtime/default", RuntimeDefault),
        (None, "docker/default", RuntimeDefault),
        (
            None,
            "localhost/profiles/a.json",
            Localhost("profiles/a.json".into()),
        ),
        (profile(ProfileType::RuntimeDefault, ""), "", RuntimeDefault),
        (
            profile(ProfileType::Unconfined, ""),
            "runtime/default",
            Unconfined,
        ),
        (
            profile(ProfileType::Localhost, "/etc/seccomp/p.json"),
            "unconfined",
            Localhost("/etc/seccomp/p.json".into()),
        ),
    ];
    for (p, deprecated, want) in table {
        let got = seccomp("c", p.clone(), deprecated).expect("valid");
        assert_eq!(got, want, "{p:?} {deprecated:?}");
    }
    assert_invalid(
        seccomp("c", None, "bogus"),
        &["c.seccomp_profile_path", "bogus"],
    );
    assert_invalid(seccomp("c", None, "localhost/"), &["seccomp_profile_path"]);
    assert_invalid(
        seccomp("c", profile(ProfileType::Localhost, ""), ""),
        &["c.seccomp", "localhost_ref"],
    );
    let bad = Some(pb::SecurityProfile {
        profile_type: 9,
        localhost_ref: String::new(),
    });
    assert_invalid(seccomp("c", bad, ""), &["seccomp.profile_type", "9"]);
}

#[test]
fn apparmor_profiles_and_deprecated_names() {
    use SecurityProfile::*;
    let table = [
        (None, "", RuntimeDefault),
        (None, "runtime/default", RuntimeDefault),
        (None, "unconfined", Unconfined),
        (None, "localhost/k8s-nginx", Localhost("k8s-nginx".into())),
        (
            profile(ProfileType::RuntimeDefault, ""),
            "unconfined",
            RuntimeDefault,
        ),
        (profile(ProfileType::Unconfined, ""), "", Unconfined),
        (
            profile(ProfileType::Localhost, "k8s-x"),
            "",
            Localhost("k8s-x".into()),
        ),
    ];
    for (p, deprecated, want) in table {
        let got = apparmor("c", p.clone(), deprecated).expect("valid");
        assert_eq!(got, want, "{p:?} {deprecated:?}");
    }
    assert_invalid(
        apparmor("c", None, "docker-default"),
        &["c.apparmor_profile", "docker-default"],
    );
    assert_invalid(
        apparmor("c", profile(ProfileType::Localhost, ""), ""),
        &["c.apparmor", "localhost_ref"],
    );
}

fn context() -> pb::LinuxContainerSecurityContext {
    pb::LinuxContainerSecurityContext {
        capabilities: Some(pb::Capability {
            add_capabilities: vec!["NET_ADMIN".into()],
            drop_capabilities: vec!["ALL".into()],
            add_ambient_capabilities: vec!["cap_net_admin".into()],
        }),
        privileged: true,
        namespace_options: Some(pb::NamespaceOption {
            network: pb::NamespaceMode::Node as i32,
            pid: pb::NamespaceMode::Target as i32,
            ipc: pb::NamespaceMode::Pod as i32,
            target_id: "abc".into(),
            userns_options: None,
        }),
        run_as_user: Some(pb::Int64Value { value: 0 }),
        run_as_group: Some(pb::Int64Value { value: 1000 }),
        run_as_username: "app".into(),
        readonly_rootfs: true,
        supplemental_groups: vec![5, 6],
        supplemental_groups_policy: pb::SupplementalGroupsPolicy::Strict as i32,
        no_new_privs: true,
        masked_paths: vec!["/proc/kcore".into()],
        readonly_paths: vec![],
        seccomp: profile(ProfileType::RuntimeDefault, ""),
        apparmor: None,
        apparmor_profile: "unconfined".into(),
        ..Default::default()
    }
}

#[test]
fn carries_every_field() {
    let s = security("app", Some(context())).expect("valid");
    assert_eq!(
        s.capabilities.add,
        ["NET_ADMIN"],
        "names pass through unchanged"
    );
    assert_eq!(s.capabilities.drop, ["ALL"]);
    assert_eq!(s.capabilities.add_ambient, ["cap_net_admin"]);
    assert!(s.privileged);
    assert_eq!(s.namespaces.network, NamespaceMode::Node);
    assert_eq!(s.namespaces.pid, NamespaceMode::Target);
    assert_eq!(s.namespaces.ipc, NamespaceMode::Pod);
    assert_eq!(s.namespaces.target_id, "abc");
    assert_eq!(s.run_as_user, Some(0), "uid 0 is set, not unset");
    assert_eq!(s.run_as_group, Some(1000));
    assert_eq!(s.run_as_username.as_deref(), Some("app"));
    assert!(s.readonly_rootfs && s.no_new_privs);
    assert_eq!(s.supplemental_groups, [5, 6]);
    assert_eq!(
        s.supplemental_groups_policy,
        SupplementalGroupsPolicy::Strict
    );
    assert_eq!(s.masked_paths, Some(vec!["/proc/kcore".to_string()]));
    assert_eq!(s.readonly_paths, None, "empty list: the defaults");
    assert_eq!(s.seccomp, SecurityProfile::RuntimeDefault);
    assert_eq!(s.apparmor, SecurityProfile::Unconfined);
}

#[test]
fn unset_users_and_paths_are_none() {
    let s = security("app", Some(pb::LinuxContainerSecurityContext::default())).expect("valid");
    assert_eq!((s.run_as_user, s.run_as_group), (None, None));
    assert_eq!(s.run_as_username, None);
    assert_eq!((s.masked_paths, s.readonly_paths), (None, None));
    assert_eq!(
        s.seccomp,
        SecurityProfile::Unconfined,
        "CRI: unset seccomp is unconfined"
    );
    assert_eq!(s.apparmor, SecurityProfile::RuntimeDefault);
    assert_eq!(
        s.supplemental_groups_policy,
        SupplementalGroupsPolicy::Merge
    );
    assert_eq!(
        security("app", None).expect("valid"),
        crate::oci::Security::default()
    );
}

#[test]
fn bad_enums_and_user_namespaces_are_invalid() {
    let mut c = context();
    c.supplemental_groups_policy = 3;
    assert_invalid(
        security("app", Some(c)),
        &["\"app\"", "supplemental_groups_policy", "3"],
    );

    let mut c = context();
    c.namespace_options.iter_mut().for_each(|n| n.ipc = 8);
    assert_invalid(security("app", Some(c)), &["namespace_options.ipc", "8"]);

    let mut c = context();
    c.namespace_options.iter_mut().for_each(|n| {
        n.userns_options = Some(pb::UserNamespace {
            mode: pb::NamespaceMode::Target as i32,
            ..Default::default()
        })
    });
    assert_invalid(
        security("app", Some(c)),
        &["\"app\"", "userns_options.mode", "TARGET"],
    );
    let mut c = context();
    c.namespace_options.iter_mut().for_each(|n| {
        n.userns_options = Some(pb::UserNamespace {
            mode: pb::NamespaceMode::Pod as i32,
            ..Default::default()
        })
    });
    assert!(matches!(
        security("app", Some(c)).expect("converted").namespaces.user,
        Some(crate::oci::UserNamespaceMode::Pod(_))
    ));

    let mut c = context();
    c.seccomp = None;
    c.seccomp_profile_path = "strict".into();
    assert_invalid(
        security("app", Some(c)),
        &["\"app\"", "seccomp_profile_path", "strict"],
    );
}
