//! AppArmor over CRI with real runc: a Localhost profile the kernel has not loaded (or where AppArmor is off) is refused before anything is made; where AppArmor is on, bosun's runtime-default profile confines RuntimeDefault and unset containers (loaded again when removed), privileged and Unconfined ones run unconfined, and a Localhost profile the test loads is enforced.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};
use bosun::oci::apparmor::{find_parser, DEFAULT_PROFILE};
use bosun::proto::runtime::v1 as pb;
use pb::security_profile::ProfileType;
use tonic::Code;

use crate::support::cri::{self, ContainerBuilder};
use crate::support::Scenario;
use crate::support::{apparmor_enabled, trial, Need};

const NEEDS: &[Need] = &[Need::Root, Need::Runc, Need::Images];
const NEEDS_APPARMOR: &[Need] = &[Need::Root, Need::Runc, Need::Images, Need::AppArmor];

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "cri::apparmor::unloaded_or_unavailable_localhost_is_refused_before_anything_is_made",
            NEEDS,
            refused,
        ),
        trial(
            "cri::apparmor::runtime_default_confines_privileged_and_unconfined_do_not_and_is_reloaded",
            NEEDS_APPARMOR,
            runtime_default,
        ),
        trial(
            "cri::apparmor::localhost_profile_is_enforced",
            NEEDS_APPARMOR,
            localhost_enforced,
        ),
    ]
}

fn profile(kind: ProfileType, name: &str) -> Option<pb::SecurityProfile> {
    Some(pb::SecurityProfile {
        profile_type: kind as i32,
        localhost_ref: name.into(),
    })
}

/// The deprecated `apparmor_profile` name (what older kubelets send).
#[allow(deprecated)]
fn deprecated_name(sc: &mut pb::LinuxContainerSecurityContext, name: &str) {
    sc.apparmor_profile = name.into();
}

/// The container's AppArmor label as it sees it, then `script`.
fn label_then(c: ContainerBuilder, script: &str) -> pb::ContainerConfig {
    c.sh(&format!("cat /proc/self/attr/current; echo; {script}"))
        .build()
}

fn refused() -> Result<()> {
    Scenario::new().run(async |s| {
        let busybox = s.image("busybox");
        let pod = s.pod(s.pod_config("aa-refused")).await?;
        let name = format!("bosun-it-not-loaded-{}", std::process::id());
        // Where AppArmor is on the profile is simply not loaded; where it is off, no Localhost
        // profile can be had (the kubelet would not send one; a direct client may).
        let why = if apparmor_enabled() {
            "is not loaded"
        } else {
            "AppArmor is not enabled"
        };
        let cases = [
            pod.container("field", &busybox).security(|sc| {
                sc.apparmor = profile(ProfileType::Localhost, &name);
            }),
            pod.container("deprecated", &busybox).security(|sc| {
                deprecated_name(sc, &format!("localhost/{name}"));
            }),
        ];
        let mut rt = s.rt.clone();
        for c in cases {
            let r = cri::try_create(&mut rt, &pod, &c).await;
            cri::refused(
                "CreateContainer with an unloaded Localhost profile",
                r,
                Code::FailedPrecondition,
                &[&name, why, "apparmor"],
            )?;
        }
        let left = cri::list_containers(&mut rt, None).await?;
        ensure!(left.is_empty(), "refused creates left containers: {left:?}");
        let dir = s.daemon.state().join("containers");
        let made = cri::entries(&dir);
        ensure!(
            made.is_empty(),
            "refused creates left {made:?} in {}",
            dir.display()
        );
        Ok(())
    })
}

fn runtime_default() -> Result<()> {
    Scenario::new().run(async |s| {
        let busybox = s.image("busybox");
        let mut rt = s.rt.clone();
        let info = cri::status_info(&mut rt, "apparmor").await?;
        ensure!(
            info["enabled"] == true && info["defaultProfile"] == DEFAULT_PROFILE,
            "Status apparmor: {info}"
        );
        let loaded = std::fs::read_to_string("/sys/kernel/security/apparmor/profiles")?;
        ensure!(
            loaded
                .lines()
                .any(|l| l == format!("{DEFAULT_PROFILE} (enforce)")),
            "{DEFAULT_PROFILE} is not loaded in enforce mode: {loaded}"
        );

        let confined = format!("{DEFAULT_PROFILE} (enforce)");
        let pod = s.pod(s.pod_config("aa-default")).await?;
        let cases = [
            (
                "runtime-default",
                pod.container("runtime-default", &busybox).security(|sc| {
                    sc.apparmor = profile(ProfileType::RuntimeDefault, "");
                }),
                confined.as_str(),
            ),
            // Nothing asked: containerd's default since kubernetes#51746, and bosun's.
            ("unset", pod.container("unset", &busybox), confined.as_str()),
            (
                "deprecated-runtime-default",
                pod.container("deprecated", &busybox).security(|sc| {
                    deprecated_name(sc, "runtime/default");
                }),
                confined.as_str(),
            ),
            (
                "unconfined",
                pod.container("unconfined", &busybox).security(|sc| {
                    sc.apparmor = profile(ProfileType::Unconfined, "");
                }),
                "unconfined",
            ),
        ];
        for (what, c, want) in cases {
            let c = label_then(c, "echo done");
            let out = cri::run_to_completion(&mut rt, &pod, &c).await?;
            ensure!(
                out.first().map(|l| l.trim_end_matches('\0')) == Some(want),
                "{what}: /proc/self/attr/current says {out:?}, want {want:?}"
            );
        }

        // A privileged container runs unconfined even when it asks for the runtime default.
        let privileged = s
            .pod(s.pod_config("aa-privileged").with(|p| {
                if let Some(sc) = p.linux.as_mut().and_then(|l| l.security_context.as_mut()) {
                    sc.privileged = true;
                }
            }))
            .await?;
        let c = privileged.container("privileged", &busybox).security(|sc| {
            sc.privileged = true;
            sc.apparmor = profile(ProfileType::RuntimeDefault, "");
        });
        let c = label_then(c, "echo done");
        let out = cri::run_to_completion(&mut rt, &privileged, &c).await?;
        ensure!(
            out.first().map(|l| l.trim_end_matches('\0')) == Some("unconfined"),
            "privileged: /proc/self/attr/current says {out:?}"
        );

        // Someone removes the profile from the kernel: the next RuntimeDefault container loads
        // it again (as containerd does) instead of being refused or running unconfined.
        std::fs::write("/sys/kernel/security/apparmor/.remove", DEFAULT_PROFILE)
            .context("remove bosun-default from the kernel")?;
        let loaded = std::fs::read_to_string("/sys/kernel/security/apparmor/profiles")?;
        ensure!(
            !loaded
                .lines()
                .any(|l| l.starts_with(&format!("{DEFAULT_PROFILE} "))),
            "{DEFAULT_PROFILE} is still loaded after .remove"
        );
        let c = pod.container("after-removal", &busybox).security(|sc| {
            sc.apparmor = profile(ProfileType::RuntimeDefault, "");
        });
        let out = cri::run_to_completion(&mut rt, &pod, &label_then(c, "echo done")).await?;
        ensure!(
            out.first().map(|l| l.trim_end_matches('\0')) == Some(confined.as_str()),
            "after the profile was removed: /proc/self/attr/current says {out:?}, want {confined:?}"
        );
        Ok(())
    })
}

/// A profile the test loaded, removed (`apparmor_parser -R`) when dropped.
struct TestProfile {
    parser: PathBuf,
    file: PathBuf,
}

impl TestProfile {
    fn load(dir: &Path, name: &str, rules: &str) -> Result<TestProfile> {
        let parser = find_parser().context("apparmor_parser")?;
        let file = dir.join(name);
        std::fs::write(
            &file,
            format!(
                "profile {name} flags=(attach_disconnected,mediate_deleted) {{\n  file,\n  \
                 network,\n  capability,\n  signal,\n  ptrace,\n  umount,\n{rules}}}\n"
            ),
        )?;
        let out = Command::new(&parser).arg("-r").arg(&file).output()?;
        if !out.status.success() {
            bail!(
                "apparmor_parser -r {}: {}",
                file.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(TestProfile { parser, file })
    }
}

impl Drop for TestProfile {
    fn drop(&mut self) {
        let removed = Command::new(&self.parser)
            .arg("-R")
            .arg(&self.file)
            .output();
        if !removed.is_ok_and(|o| o.status.success()) {
            eprintln!("could not remove AppArmor profile {}", self.file.display());
        }
    }
}

fn localhost_enforced() -> Result<()> {
    Scenario::new().run(async |s| {
        let busybox = s.image("busybox");
        let name = format!("bosun-it-deny-{}", std::process::id());
        let _profile = TestProfile::load(s.daemon.dir(), &name, "  deny /tmp/denied* w,\n")?;
        let pod = s.pod(s.pod_config("aa-localhost")).await?;
        let script = "echo x > /tmp/allowed && echo allowed=yes; \
                      (echo x > /tmp/denied) 2>/dev/null && echo denied=no || echo denied=yes";
        let mut rt = s.rt.clone();
        for (what, c) in [
            (
                "field",
                pod.container("field", &busybox).security(|sc| {
                    sc.apparmor = profile(ProfileType::Localhost, &name);
                }),
            ),
            (
                "deprecated",
                pod.container("deprecated", &busybox).security(|sc| {
                    deprecated_name(sc, &format!("localhost/{name}"));
                }),
            ),
        ] {
            let c = label_then(c, script);
            let out = cri::run_to_completion(&mut rt, &pod, &c).await?;
            let label = out.first().map(|l| l.trim_end_matches('\0').to_string());
            ensure!(
                label == Some(format!("{name} (enforce)"))
                    && out.iter().any(|l| l == "allowed=yes")
                    && out.iter().any(|l| l == "denied=yes"),
                "{what}: {out:?}, want the label {name:?}, /tmp/allowed written, /tmp/denied refused"
            );
        }
        Ok(())
    })
}
