//! What a container runs, and as whom: the image's entrypoint, command, env and working dir
//! with the CRI overrides; the image user, run_as_user and groups; default, dropped and added
//! capabilities and privileged containers.

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, NEEDS};
use crate::support::trial;
use crate::support::Scenario;

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "cri::containers::image_entrypoint_cmd_env_and_workdir_with_overrides",
            NEEDS,
            image_config,
        ),
        trial(
            "cri::containers::image_user_run_as_user_and_groups",
            NEEDS,
            users,
        ),
        trial(
            "cri::containers::capabilities_default_drop_add_and_privileged",
            NEEDS,
            capabilities,
        ),
    ]
}

fn image_config() -> Result<()> {
    Scenario::new().image("entrypoint").run(async |s| {
        let d = &s.daemon;
        let entry = s.image("entrypoint");
        let mut rt = s.rt.clone();
        let pod = cri::run_pod(&mut rt, cri::pod_config(d, "image-config")).await?;

        // ENTRYPOINT ["/bin/echo", "entry"] + CMD ["cmd"].
        let c = cri::container_config(&pod, "default", &entry);
        let out = cri::run_to_completion(&mut rt, &pod, &c).await?;
        ensure!(out == ["entry cmd"], "ENTRYPOINT+CMD: {out:?}");

        // args replace CMD only.
        let mut c = cri::container_config(&pod, "args", &entry);
        c.args = vec!["a".into(), "b c".into()];
        let out = cri::run_to_completion(&mut rt, &pod, &c).await?;
        ensure!(out == ["entry a b c"], "args override: {out:?}");

        // command replaces ENTRYPOINT (and drops CMD); image env and WorkingDir stay.
        let mut c = cri::container_config(&pod, "command", &entry);
        c.command = vec!["sh".into(), "-c".into()];
        c.args = vec!["echo foo=$FOO bar=$BAR path=$PATH; pwd; echo \"$0\"".into()];
        c.envs = vec![cri::env("BAR", "baz qux")];
        let out = cri::run_to_completion(&mut rt, &pod, &c).await?;
        ensure!(
        out.first().map(String::as_str)
            == Some(
                "foo=bar bar=baz qux path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
            )
            && out.get(1).map(String::as_str) == Some("/tmp")
            && out.get(2).map(String::as_str) == Some("sh"),
        "command override with image env and workdir: {out:?}"
    );

        // working_dir and env override the image's.
        let mut c = cri::sh_config(&pod, "workdir", &entry, "echo foo=$FOO; pwd");
        c.working_dir = "/etc".into();
        c.envs = vec![cri::env("FOO", "override")];
        let out = cri::run_to_completion(&mut rt, &pod, &c).await?;
        ensure!(
            out == ["foo=override", "/etc"],
            "working_dir/env override: {out:?}"
        );

        // A working dir that does not exist in the image is created.
        let mut c = cri::sh_config(&pod, "newdir", &entry, "pwd");
        c.working_dir = "/does/not/exist/yet".into();
        let out = cri::run_to_completion(&mut rt, &pod, &c).await?;
        ensure!(
            out == ["/does/not/exist/yet"],
            "missing working_dir: {out:?}"
        );

        cri::remove_pod(&mut rt, &pod.id).await?;
        Ok(())
    })
}

fn users() -> Result<()> {
    Scenario::new()
        .image("busybox")
        .image("nonroot")
        .image("numeric-user")
        .run(async |s| {
            let d = &s.daemon;
            let busybox = s.image("busybox");
            let nonroot = s.image("nonroot");
            let numeric = s.image("numeric-user");
            let mut rt = s.rt.clone();
            let pod = cri::run_pod(&mut rt, cri::pod_config(d, "users")).await?;
            const ID: &str = "echo uid=$(id -u) gid=$(id -g) groups=$(id -G)";
            let ids = |out: &[String]| {
                let line = out.first().cloned().unwrap_or_default();
                let get = |k: &str| {
                    line.split(' ')
                        .find_map(|f| f.strip_prefix(k).map(str::to_string))
                        .unwrap_or_default()
                };
                let groups: Vec<String> = line
                    .split_once("groups=")
                    .map(|(_, g)| g.split(' ').map(str::to_string).collect())
                    .unwrap_or_default();
                (get("uid="), get("gid="), groups, line)
            };
            struct Case {
                name: &'static str,
                image: String,
                user: Option<i64>,
                group: Option<i64>,
                username: &'static str,
                supplemental: Vec<i64>,
                want: (&'static str, &'static str),
                groups_include: &'static [&'static str],
            }
            let cases = [
                Case {
                    name: "image-user-name",
                    image: nonroot.clone(),
                    user: None,
                    group: None,
                    username: "",
                    supplemental: vec![],
                    want: ("1000", "1000"),
                    // app is a member of audio (29) in the image's /etc/group.
                    groups_include: &["1000", "29"],
                },
                Case {
                    name: "image-user-numeric",
                    image: numeric.clone(),
                    user: None,
                    group: None,
                    username: "",
                    supplemental: vec![],
                    want: ("1000", "1000"),
                    groups_include: &["1000"],
                },
                Case {
                    name: "run-as-user",
                    image: busybox.clone(),
                    user: Some(1234),
                    group: None,
                    username: "",
                    supplemental: vec![],
                    want: ("1234", "0"),
                    groups_include: &["0"],
                },
                Case {
                    name: "run-as-user-and-group",
                    image: busybox.clone(),
                    user: Some(1234),
                    group: Some(5678),
                    username: "",
                    supplemental: vec![4242],
                    want: ("1234", "5678"),
                    groups_include: &["5678", "4242"],
                },
                Case {
                    name: "run-as-username",
                    image: busybox.clone(),
                    user: None,
                    group: None,
                    username: "app",
                    supplemental: vec![],
                    want: ("1000", "1000"),
                    groups_include: &["1000"],
                },
                Case {
                    name: "run-as-root-over-image-user",
                    image: nonroot.clone(),
                    user: Some(0),
                    group: None,
                    username: "",
                    supplemental: vec![],
                    want: ("0", "0"),
                    groups_include: &["0"],
                },
            ];
            for case in cases {
                let mut c = cri::sh_config(&pod, case.name, &case.image, ID);
                let sc = cri::security(&mut c);
                sc.run_as_user = case.user.map(|value| pb::Int64Value { value });
                sc.run_as_group = case.group.map(|value| pb::Int64Value { value });
                sc.run_as_username = case.username.into();
                sc.supplemental_groups = case.supplemental.clone();
                let (out, status) = cri::run_to_completion_status(&mut rt, &pod, &c).await?;
                let (uid, gid, groups, line) = ids(&out);
                let user = status.user.as_ref().and_then(|u| u.linux.as_ref());
                ensure!(
                    user.map(|u| (u.uid.to_string(), u.gid.to_string()))
                        == Some((uid.clone(), gid.clone())),
                    "{}: ContainerStatus.user {user:?} but the process runs as {line:?}",
                    case.name
                );
                ensure!(
                    (uid.as_str(), gid.as_str()) == case.want,
                    "{}: {line:?}, want uid/gid {:?}",
                    case.name,
                    case.want
                );
                for g in case.groups_include {
                    ensure!(
                        groups.iter().any(|x| x == g),
                        "{}: groups {groups:?} lack {g}",
                        case.name
                    );
                }
            }
            cri::remove_pod(&mut rt, &pod.id).await?;
            Ok(())
        })
}

/// name, add, drop, privileged, expected CapEff and CapBnd.
type CapCase<'a> = (&'a str, Vec<&'a str>, Vec<&'a str>, bool, u64);

/// The bit mask of capability numbers.
fn caps(bits: &[u32]) -> u64 {
    bits.iter().fold(0, |m, b| m | (1u64 << b))
}

fn capabilities() -> Result<()> {
    Scenario::new().run(async |s| {
        let d = &s.daemon;
        let busybox = s.image("busybox");
        // containerd's default set: CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID SETPCAP
        // NET_BIND_SERVICE NET_RAW SYS_CHROOT MKNOD AUDIT_WRITE SETFCAP.
        let default = caps(&[0, 1, 3, 4, 5, 6, 7, 8, 10, 13, 18, 27, 29, 31]);
        let own = std::fs::read_to_string("/proc/self/status")?;
        let host = own
            .lines()
            .find_map(|l| l.strip_prefix("CapBnd:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .context("own CapBnd")?;
        let mut rt = s.rt.clone();
        let mut cfg = cri::pod_config(d, "caps");
        if let Some(sc) = cfg.linux.as_mut().and_then(|l| l.security_context.as_mut()) {
            sc.privileged = true;
        }
        let pod = cri::run_pod(&mut rt, cfg).await?;
        let script = "grep -E '^Cap(Eff|Bnd):' /proc/self/status; echo devices=$(ls /dev | wc -l)";
        let cases: [CapCase; 4] = [
            ("default", vec![], vec![], false, default),
            ("drop-all", vec![], vec!["ALL"], false, 0),
            (
                "add-net-admin-drop-kill",
                vec!["NET_ADMIN"],
                vec!["CAP_KILL"],
                false,
                (default | caps(&[12])) & !caps(&[5]),
            ),
            ("privileged", vec![], vec![], true, host),
        ];
        for (name, add, drop, privileged, want) in cases {
            let mut c = cri::sh_config(&pod, name, &busybox, script);
            let sc = cri::security(&mut c);
            sc.privileged = privileged;
            sc.capabilities = Some(pb::Capability {
                add_capabilities: add.iter().map(|s| s.to_string()).collect(),
                drop_capabilities: drop.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            });
            let out = cri::run_to_completion(&mut rt, &pod, &c).await?;
            let get = |k: &str| {
                out.iter()
                    .find_map(|l| l.strip_prefix(k))
                    .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            };
            ensure!(
                get("CapEff:") == Some(want) && get("CapBnd:") == Some(want),
                "{name}: {out:?}, want {want:#018x}"
            );
            let devices: usize = out
                .iter()
                .find_map(|l| l.strip_prefix("devices="))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            // The host's /dev for privileged containers, a minimal one otherwise.
            ensure!(
                (devices > 30) == privileged,
                "{name}: {devices} entries in /dev"
            );
        }
        cri::remove_pod(&mut rt, &pod.id).await?;
        Ok(())
    })
}
