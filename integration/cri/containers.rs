//! CRI containers over the socket with real runc: image config and overrides, users, mounts
//! and read-only rootfs, exit codes and reasons (signals, OOM, start failures), the CRI log
//! file, ContainerStatus fields.

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cgroup;
use crate::support::cri::{self, map, Pod, Rt, NEEDS};
use crate::support::{block_on, trial};

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
            "cri::containers::readonly_rootfs_and_bind_mounts",
            NEEDS,
            mounts,
        ),
        trial(
            "cri::containers::exit_codes_and_reasons_signal_oom_start_failure",
            NEEDS,
            exit_codes,
        ),
        trial(
            "cri::containers::log_file_in_cri_format_with_long_lines",
            NEEDS,
            logs,
        ),
        trial(
            "cri::containers::status_fields_follow_the_lifecycle",
            NEEDS,
            status_fields,
        ),
        trial(
            "cri::containers::update_container_resources_reaches_the_cgroup",
            NEEDS,
            update_resources,
        ),
        trial(
            "cri::containers::capabilities_default_drop_add_and_privileged",
            NEEDS,
            capabilities,
        ),
    ]
}

/// Creates and starts `c` in `pod`, waits for its exit (10 s), checks exit 0 and returns its
/// stdout lines.
async fn run_to_completion(rt: &mut Rt, pod: &Pod, c: &pb::ContainerConfig) -> Result<Vec<String>> {
    Ok(run_to_completion_status(rt, pod, c).await?.0)
}

/// [`run_to_completion`], also returning the final status.
async fn run_to_completion_status(
    rt: &mut Rt,
    pod: &Pod,
    c: &pb::ContainerConfig,
) -> Result<(Vec<String>, pb::ContainerStatus)> {
    let id = cri::create_start(rt, pod, c).await?;
    let s = cri::wait_exited(rt, &id, 10).await?;
    let log = cri::read_log(&pod.log_of(c))?;
    let out = cri::lines_of(&log, "stdout");
    let name = c
        .metadata
        .as_ref()
        .map(|m| m.name.clone())
        .unwrap_or_default();
    cri::check_exit(&s, 0, "Completed").with_context(|| {
        format!(
            "container {name}: stdout {out:?} stderr {:?}",
            cri::lines_of(&log, "stderr")
        )
    })?;
    Ok((out, s))
}

fn image_config() -> Result<()> {
    let d = cri::daemon()?;
    let entry = cri::import(&d, "entrypoint")?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let pod = cri::run_pod(&mut rt, cri::pod_config(&d, "image-config")).await?;

            // ENTRYPOINT ["/bin/echo", "entry"] + CMD ["cmd"].
            let c = cri::container_config(&pod, "default", &entry);
            let out = run_to_completion(&mut rt, &pod, &c).await?;
            ensure!(out == ["entry cmd"], "ENTRYPOINT+CMD: {out:?}");

            // args replace CMD only.
            let mut c = cri::container_config(&pod, "args", &entry);
            c.args = vec!["a".into(), "b c".into()];
            let out = run_to_completion(&mut rt, &pod, &c).await?;
            ensure!(out == ["entry a b c"], "args override: {out:?}");

            // command replaces ENTRYPOINT (and drops CMD); image env and WorkingDir stay.
            let mut c = cri::container_config(&pod, "command", &entry);
            c.command = vec!["sh".into(), "-c".into()];
            c.args = vec!["echo foo=$FOO bar=$BAR path=$PATH; pwd; echo \"$0\"".into()];
            c.envs = vec![cri::env("BAR", "baz qux")];
            let out = run_to_completion(&mut rt, &pod, &c).await?;
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
            let out = run_to_completion(&mut rt, &pod, &c).await?;
            ensure!(
                out == ["foo=override", "/etc"],
                "working_dir/env override: {out:?}"
            );

            // A working dir that does not exist in the image is created.
            let mut c = cri::sh_config(&pod, "newdir", &entry, "pwd");
            c.working_dir = "/does/not/exist/yet".into();
            let out = run_to_completion(&mut rt, &pod, &c).await?;
            ensure!(
                out == ["/does/not/exist/yet"],
                "missing working_dir: {out:?}"
            );

            cri::remove_pod(&mut rt, &pod.id).await?;
            Ok::<_, anyhow::Error>(())
        }),
    )?;
    cri::assert_clean(&d)
}

fn users() -> Result<()> {
    let d = cri::daemon()?;
    let busybox = cri::import(&d, "busybox")?;
    let nonroot = cri::import(&d, "nonroot")?;
    let numeric = cri::import(&d, "numeric-user")?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let pod = cri::run_pod(&mut rt, cri::pod_config(&d, "users")).await?;
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
                let (out, status) = run_to_completion_status(&mut rt, &pod, &c).await?;
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
            Ok::<_, anyhow::Error>(())
        }),
    )?;
    cri::assert_clean(&d)
}

fn mounts() -> Result<()> {
    let d = cri::daemon()?;
    let busybox = cri::import(&d, "busybox")?;
    let ro_src = d.dir().join("ro-src");
    let rw_src = d.dir().join("rw-src");
    let missing = d.dir().join("missing-src/sub");
    std::fs::create_dir_all(&ro_src)?;
    std::fs::create_dir_all(&rw_src)?;
    std::fs::write(ro_src.join("hello"), "hello from the host\n")?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let pod = cri::run_pod(&mut rt, cri::pod_config(&d, "mounts")).await?;
            let script = "touch /rootfs-write 2>/dev/null && echo rootfs=rw || echo rootfs=ro; \
            echo data=$(cat /data/hello); \
            touch /data/new 2>/dev/null && echo data-write=yes || echo data-write=no; \
            echo written > /rw/out && echo rw=ok; \
            test -d /made && echo made=ok";
            let mut c = cri::sh_config(&pod, "ro", &busybox, script);
            cri::security(&mut c).readonly_rootfs = true;
            let mount = |container: &str, host: &std::path::Path, readonly: bool| pb::Mount {
                container_path: container.into(),
                host_path: host.display().to_string(),
                readonly,
                ..Default::default()
            };
            c.mounts = vec![
                mount("/data", &ro_src, true),
                mount("/rw", &rw_src, false),
                mount("/made", &missing, false),
            ];
            let id = cri::create_start(&mut rt, &pod, &c).await?;
            let s = cri::wait_exited(&mut rt, &id, 10).await?;
            let log = cri::read_log(&pod.log_of(&c))?;
            let out = cri::lines_of(&log, "stdout");
            cri::check_exit(&s, 0, "Completed")
                .with_context(|| format!("{out:?} {:?}", cri::lines_of(&log, "stderr")))?;
            ensure!(
                out == [
                    "rootfs=ro",
                    "data=hello from the host",
                    "data-write=no",
                    "rw=ok",
                    "made=ok"
                ],
                "read-only rootfs and mounts: {out:?}"
            );
            ensure!(
                std::fs::read_to_string(rw_src.join("out"))? == "written\n",
                "the rw mount's write is not on the host"
            );
            ensure!(
                !ro_src.join("new").exists(),
                "wrote through a read-only mount"
            );
            ensure!(missing.is_dir(), "a missing host path must be created");
            for want in &c.mounts {
                ensure!(
                    s.mounts
                        .iter()
                        .any(|m| m.container_path == want.container_path
                            && m.host_path == want.host_path
                            && m.readonly == want.readonly),
                    "ContainerStatus.mounts lacks {want:?}: {:?}",
                    s.mounts
                );
            }
            // Without readonly_rootfs the rootfs is writable, and writes stay in the container.
            let c = cri::sh_config(
                &pod,
                "rw",
                &busybox,
                "touch /rootfs-write && echo rootfs=rw",
            );
            let id = cri::create_start(&mut rt, &pod, &c).await?;
            let s = cri::wait_exited(&mut rt, &id, 10).await?;
            cri::check_exit(&s, 0, "Completed")?;
            let out = cri::lines_of(&cri::read_log(&pod.log_of(&c))?, "stdout");
            ensure!(out == ["rootfs=rw"], "{out:?}");
            let c = cri::sh_config(
                &pod,
                "fresh",
                &busybox,
                "test -e /rootfs-write && echo leaked || echo fresh",
            );
            let out = run_to_completion(&mut rt, &pod, &c).await?;
            ensure!(
                out == ["fresh"],
                "one container's rootfs write seen by another: {out:?}"
            );
            cri::remove_pod(&mut rt, &pod.id).await?;
            Ok::<_, anyhow::Error>(())
        }),
    )?;
    cri::assert_clean(&d)
}

fn exit_codes() -> Result<()> {
    let d = cri::daemon()?;
    let busybox = cri::import(&d, "busybox")?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            // A shared pid namespace: the container's sh is not PID 1, so a signal with its
            // default action kills it.
            let mut cfg = cri::pod_config(&d, "exits");
            cri::share_pid(&mut cfg);
            let pod = cri::run_pod(&mut rt, cfg).await?;
            let mut cases: Vec<(String, String, i32, &str)> = [
                ("exit-3", "exit 3", 3, "Error"),
                ("exit-0", "echo done; exit 0", 0, "Completed"),
                ("usr1", "kill -USR1 $$; sleep 5", 128 + 10, "Error"),
            ]
            .map(|(n, s, c, r)| (n.to_string(), s.to_string(), c, r))
            .into();
            // Instant exits race the daemon's bookkeeping of the start: try several.
            for code in [0, 1, 2, 42, 127, 255] {
                let reason = if code == 0 { "Completed" } else { "Error" };
                cases.push((
                    format!("instant-{code}"),
                    format!("exit {code}"),
                    code,
                    reason,
                ));
            }
            let mut ids = Vec::new();
            for (name, script, _, _) in &cases {
                let c = cri::sh_config(&pod, name, &busybox, script);
                ids.push(cri::create_start(&mut rt, &pod, &c).await?);
            }
            // Timestamp order is checked last, so one report shows every other problem too.
            let mut disorder = Vec::new();
            for ((name, _, code, reason), id) in cases.iter().zip(&ids) {
                let s = cri::wait_exited(&mut rt, id, 10).await?;
                cri::check_exit(&s, *code, reason).with_context(|| name.to_string())?;
                if !(s.created_at <= s.started_at
                    && s.started_at <= s.finished_at
                    && s.started_at > 0)
                {
                    disorder.push(format!(
                        "{name}: created {} started {} finished {} (finished - started = {} ns)",
                        s.created_at,
                        s.started_at,
                        s.finished_at,
                        s.finished_at - s.started_at
                    ));
                }
            }

            // OOM: 16 MiB and a shell whose string doubles until the kernel kills it.
            let mut c = cri::sh_config(&pod, "oom", &busybox, "x=a; while true; do x=$x$x; done");
            cri::resources(&mut c).memory_limit_in_bytes = 16 << 20;
            let id = cri::create_start(&mut rt, &pod, &c).await?;
            let s = cri::wait_exited(&mut rt, &id, 20).await?;
            cri::check_exit(&s, 137, "OOMKilled")?;

            // Start failure: the command does not exist. CreateContainer runs nothing, so it
            // succeeds (as containerd's); StartContainer fails naming the container and the
            // binary, and leaves it EXITED (128, StartError) with no monitor or runc state.
            let mut c = cri::container_config(&pod, "no-such-binary", &busybox);
            c.command = vec!["/no-such-binary".into()];
            let id = cri::create(&mut rt, &pod, &c).await?;
            let err = cri::start(&mut rt, &id)
                .await
                .err()
                .context("StartContainer of a missing binary succeeded")?;
            eprintln!("StartContainer of a missing binary: {err:#}");
            let code = err
                .downcast_ref::<tonic::Status>()
                .map(|s| s.code())
                .context("StartContainer's error is no gRPC status")?;
            ensure!(
                code == tonic::Code::FailedPrecondition
                    && format!("{err:#}").contains("no-such-binary")
                    && format!("{err:#}").contains(&id),
                "{err:#}"
            );
            let s = cri::status(&mut rt, &id).await?;
            ensure!(
                cri::state_of(&s) == pb::ContainerState::ContainerExited
                    && s.exit_code == 128
                    && s.reason == "StartError"
                    && s.message.contains("no-such-binary"),
                "a failed start: {s:?}"
            );
            ensure!(
                cri::monitors_of(&id).is_empty() && !cri::runc_containers(&d.state()).contains(&id),
                "a failed start left its monitor or runc state"
            );
            let again = rt
                .start_container(pb::StartContainerRequest {
                    container_id: id.clone(),
                })
                .await;
            cri::refused(
                "StartContainer after a failed start",
                again,
                tonic::Code::FailedPrecondition,
                &[&id],
            )?;
            cri::remove_pod(&mut rt, &pod.id).await?;
            ensure!(
                disorder.is_empty(),
                "timestamps out of order (created <= started <= finished):\n  {}",
                disorder.join("\n  ")
            );
            Ok::<_, anyhow::Error>(())
        }),
    )?;
    cri::assert_clean(&d)
}

/// The monitor's default longest log record (src/monitor/args.rs, containerd's default).
const MAX_LINE: usize = 16 * 1024;

fn logs() -> Result<()> {
    let d = cri::daemon()?;
    let busybox = cri::import(&d, "busybox")?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let pod = cri::run_pod(&mut rt, cri::pod_config(&d, "logs")).await?;
            let script = "echo out-1; echo err-1 >&2; \
            head -c 40000 /dev/zero | tr '\\0' a; echo; \
            head -c 20000 /dev/zero | tr '\\0' b >&2; echo >&2; \
            echo 'out 2  with  spaces'; echo err-2 >&2; printf tail-without-newline";
            let c = cri::sh_config(&pod, "logs", &busybox, script);
            let id = cri::create_start(&mut rt, &pod, &c).await?;
            let s = cri::wait_exited(&mut rt, &id, 10).await?;
            cri::check_exit(&s, 0, "Completed")?;
            let path = pod.log_of(&c);
            ensure!(
                s.log_path == path.display().to_string(),
                "log_path {:?}, want {}",
                s.log_path,
                path.display()
            );
            let log = cri::read_log(&path)?;
            let out = cri::lines_of(&log, "stdout");
            let err = cri::lines_of(&log, "stderr");
            let a = "a".repeat(40000);
            let b = "b".repeat(20000);
            ensure!(
                out.len() == 4
                    && out[0] == "out-1"
                    && out[1] == a
                    && out[2] == "out 2  with  spaces"
                    && out[3] == "tail-without-newline",
                "stdout lines {:?}",
                out.iter().map(|l| l.len()).collect::<Vec<_>>()
            );
            ensure!(
                err.len() == 3 && err[0] == "err-1" && err[1] == b && err[2] == "err-2",
                "stderr lines {:?}",
                err.iter().map(|l| l.len()).collect::<Vec<_>>()
            );
            // The long lines: cut into P pieces of at most the buffer, the last piece F.
            for (stream, ch, len) in [("stdout", 'a', 40000usize), ("stderr", 'b', 20000)] {
                let pieces: Vec<&cri::LogLine> = log
                    .iter()
                    .filter(|l| l.stream == stream && l.msg.starts_with(ch))
                    .collect();
                let shape: Vec<(String, usize)> = pieces
                    .iter()
                    .map(|l| (l.tag.clone(), l.msg.len()))
                    .collect();
                eprintln!("{stream} long line pieces: {shape:?}");
                let Some((last, first)) = shape.split_last() else {
                    anyhow::bail!("no {stream} pieces");
                };
                ensure!(
                pieces.len() >= len.div_ceil(MAX_LINE)
                    && first.iter().all(|(t, n)| t == "P" && *n <= MAX_LINE)
                    && last.0 == "F"
                    && last.1 <= MAX_LINE,
                "{stream}: a {len}-byte line must be P pieces of at most {MAX_LINE} then F: {shape:?}"
            );
            }
            // A tty container: one stream, logged as stdout.
            let mut t = cri::sh_config(&pod, "tty", &busybox, "echo to-tty; echo err-tty >&2");
            t.tty = true;
            let id = cri::create_start(&mut rt, &pod, &t).await?;
            cri::check_exit(&cri::wait_exited(&mut rt, &id, 10).await?, 0, "Completed")?;
            let tty_log = cri::read_log(&pod.log_of(&t))?;
            let tty_out: Vec<String> = cri::lines_of(&tty_log, "stdout")
                .into_iter()
                .map(|l| l.trim_end_matches('\r').to_string())
                .collect();
            ensure!(
                tty_out == ["to-tty", "err-tty"] && cri::lines_of(&tty_log, "stderr").is_empty(),
                "tty log: {tty_log:?}"
            );
            // Short lines are single F records.
            for l in log
                .iter()
                .filter(|l| l.msg.len() < 100 && l.msg != "tail-without-newline")
            {
                ensure!(l.tag == "F", "short line not F: {l:?}");
            }
            cri::remove_pod(&mut rt, &pod.id).await?;
            ensure!(path.exists(), "the log must outlive the container");
            Ok::<_, anyhow::Error>(())
        }),
    )?;
    cri::assert_clean(&d)
}

fn status_fields() -> Result<()> {
    let d = cri::daemon()?;
    let busybox = cri::import(&d, "busybox")?;
    let term = d.dir().join("termination-log");
    std::fs::write(&term, "")?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let image = d
                .images()
                .await?
                .image_status(pb::ImageStatusRequest {
                    image: Some(pb::ImageSpec {
                        image: busybox.clone(),
                        ..Default::default()
                    }),
                    verbose: false,
                })
                .await?
                .into_inner()
                .image
                .context("imported image not found")?;
            let pod = cri::run_pod(&mut rt, cri::pod_config(&d, "status")).await?;
            let script = "trap 'echo bye-from-trap > /dev/termination-log; exit 1' TERM; \
            echo started; while :; do sleep 0.1; done";
            let mut c = cri::sh_config(&pod, "status", &busybox, script);
            c.labels = map(&[("io.kubernetes.container.name", "status"), ("x", "y")]);
            c.annotations = map(&[
                ("io.kubernetes.container.restartCount", "0"),
                (
                    "io.kubernetes.container.terminationMessagePath",
                    "/dev/termination-log",
                ),
                ("bosun.test/note", "kept verbatim: {\"json\": true}"),
            ]);
            c.mounts = vec![pb::Mount {
                container_path: "/dev/termination-log".into(),
                host_path: term.display().to_string(),
                ..Default::default()
            }];
            let t0 = cri::now_ns();
            let id = cri::create(&mut rt, &pod, &c).await?;
            let created = cri::status(&mut rt, &id).await?;
            let check_common = |s: &pb::ContainerStatus| -> Result<()> {
                ensure!(s.id == id, "id {}", s.id);
                ensure!(s.metadata == c.metadata, "metadata {:?}", s.metadata);
                ensure!(
                    s.image.as_ref().map(|i| i.image.as_str()) == Some(busybox.as_str())
                        || s.image.as_ref().map(|i| i.image.as_str()) == Some(image.id.as_str()),
                    "image {:?} (want {busybox} or {})",
                    s.image,
                    image.id
                );
                ensure!(
                    s.image_ref == image.id || image.repo_digests.contains(&s.image_ref),
                    "image_ref {:?}: not the image id {} nor a repo digest {:?}",
                    s.image_ref,
                    image.id,
                    image.repo_digests
                );
                ensure!(s.labels == c.labels, "labels {:?}", s.labels);
                ensure!(
                    s.annotations == c.annotations,
                    "annotations {:?}",
                    s.annotations
                );
                ensure!(
                    s.log_path == pod.log_of(&c).display().to_string(),
                    "log_path {:?}",
                    s.log_path
                );
                ensure!(
                    s.mounts
                        .iter()
                        .any(|m| m.container_path == "/dev/termination-log"
                            && m.host_path == term.display().to_string()),
                    "mounts {:?}",
                    s.mounts
                );
                Ok(())
            };
            ensure!(
                cri::state_of(&created) == pb::ContainerState::ContainerCreated,
                "after create: {created:?}"
            );
            ensure!(
                created.created_at >= t0
                    && created.created_at <= cri::now_ns()
                    && created.started_at == 0
                    && created.finished_at == 0,
                "created timestamps: {} {} {}",
                created.created_at,
                created.started_at,
                created.finished_at
            );
            check_common(&created)?;
            let listed = cri::list_containers(&mut rt, None).await?;
            let item = listed.first().context("not listed")?;
            ensure!(
                listed.len() == 1
                    && item.id == id
                    && item.pod_sandbox_id == pod.id
                    && item.metadata == c.metadata
                    && item.state == pb::ContainerState::ContainerCreated as i32
                    && item.created_at == created.created_at
                    && item.labels == c.labels
                    && item.annotations == c.annotations
                    && item.image_ref == created.image_ref
                    && item.image == created.image,
                "listed {item:?} vs status {created:?}"
            );

            cri::start(&mut rt, &id).await?;
            let running = cri::status(&mut rt, &id).await?;
            ensure!(
                cri::state_of(&running) == pb::ContainerState::ContainerRunning
                    && running.started_at >= running.created_at
                    && running.created_at == created.created_at
                    && running.finished_at == 0,
                "after start: {running:?}"
            );
            check_common(&running)?;
            cri::wait_log(&pod.log_of(&c), 10, |l| l.iter().any(|x| x == "started")).await?;

            let took = cri::stop(&mut rt, &id, 10).await?;
            let exited = cri::status(&mut rt, &id).await?;
            cri::check_exit(&exited, 1, "Error")?;
            ensure!(
                took.as_secs_f64() < 5.0,
                "TERM-honouring stop took {took:?}"
            );
            ensure!(
                exited.created_at == created.created_at
                    && exited.started_at == running.started_at
                    && exited.finished_at >= exited.started_at
                    && exited.finished_at <= cri::now_ns(),
                "timestamps after exit: created {} started {} finished {}",
                exited.created_at,
                exited.started_at,
                exited.finished_at
            );
            // The kubelet reads the termination-message file itself and appends it to this
            // message: the runtime reporting it too shows "bye-from-trap: bye-from-trap".
            ensure!(
                exited.message.is_empty()
                    && std::fs::read_to_string(&term)?.trim_end() == "bye-from-trap",
                "ContainerStatus.message {:?} (must not carry the termination message)",
                exited.message
            );
            check_common(&exited)?;
            let again = cri::status(&mut rt, &id).await?;
            ensure!(
                again == exited,
                "status changed by itself: {again:?} vs {exited:?}"
            );

            cri::remove(&mut rt, &id).await?;
            let gone = cri::status(&mut rt, &id)
                .await
                .err()
                .context("status after remove")?;
            ensure!(
                gone.chain()
                    .find_map(|e| e.downcast_ref::<tonic::Status>())
                    .is_some_and(|s| s.code() == tonic::Code::NotFound),
                "{gone:#}"
            );
            cri::remove(&mut rt, &id)
                .await
                .context("second RemoveContainer")?;
            ensure!(pod.log_of(&c).exists(), "RemoveContainer must keep the log");
            cri::remove_pod(&mut rt, &pod.id).await?;
            Ok::<_, anyhow::Error>(())
        }),
    )?;
    cri::assert_clean(&d)
}

fn update_resources() -> Result<()> {
    let d = cri::daemon()?;
    let busybox = cri::import(&d, "busybox")?;
    let parent = d.cgroup_parent();
    let read = |controller: &str, id: &str, file: &str| -> String {
        cgroup::read(&cgroup::container_dir(&parent, id), controller, file).unwrap_or_default()
    };
    // What the cgroup files say: v1 (memory limit, shares, quota, period) or v2 (memory.max,
    // cpu.weight converted from the shares as runc does, cpu.max).
    let limits = |id: &str| -> Vec<String> {
        if cgroup::unified() {
            vec![
                read("memory", id, "memory.max"),
                read("cpu", id, "cpu.weight"),
                read("cpu", id, "cpu.max"),
            ]
        } else {
            vec![
                read("memory", id, "memory.limit_in_bytes"),
                read("cpu", id, "cpu.shares"),
                format!(
                    "{} {}",
                    read("cpu", id, "cpu.cfs_quota_us"),
                    read("cpu", id, "cpu.cfs_period_us")
                ),
            ]
        }
    };
    let (shares_512, shares_1024, no_quota) = if cgroup::unified() {
        ("20", "39", "max 100000")
    } else {
        ("512", "1024", "-1 100000")
    };
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let pod = cri::run_pod(&mut rt, cri::pod_config(&d, "update")).await?;
            let mut c = cri::sh_config(&pod, "limited", &busybox, "exec sleep 1000");
            {
                let r = cri::resources(&mut c);
                r.memory_limit_in_bytes = 64 << 20;
                r.cpu_shares = 512;
            }
            let id = cri::create_start(&mut rt, &pod, &c).await?;
            cri::wait_state(&mut rt, &id, pb::ContainerState::ContainerRunning, 10).await?;
            let initial = limits(&id);
            ensure!(
                initial
                    == [
                        (64u64 << 20).to_string(),
                        shares_512.into(),
                        no_quota.into()
                    ],
                "initial limits (memory, cpu weight, quota): {initial:?}"
            );
            let new = pb::LinuxContainerResources {
                memory_limit_in_bytes: 128 << 20,
                cpu_shares: 1024,
                cpu_period: 100_000,
                cpu_quota: 50_000,
                ..Default::default()
            };
            rt.update_container_resources(pb::UpdateContainerResourcesRequest {
                container_id: id.clone(),
                linux: Some(new.clone()),
                ..Default::default()
            })
            .await
            .context("UpdateContainerResources")?;
            let got = limits(&id);
            ensure!(
                got == [
                    (128u64 << 20).to_string(),
                    shares_1024.into(),
                    "50000 100000".into()
                ],
                "cgroup after update (memory, cpu weight, quota): {got:?}"
            );
            let s = cri::status(&mut rt, &id).await?;
            let linux = s
                .resources
                .and_then(|r| r.linux)
                .context("no resources in status")?;
            ensure!(
                linux.memory_limit_in_bytes == new.memory_limit_in_bytes
                    && linux.cpu_shares == new.cpu_shares
                    && linux.cpu_quota == new.cpu_quota
                    && linux.cpu_period == new.cpu_period,
                "ContainerStatus.resources after update: {linux:?}"
            );
            // Updated while created (no cgroup yet, issue 13): the start applies the update.
            let mut early = c.clone();
            if let Some(m) = early.metadata.as_mut() {
                m.name = "updated-before-start".into();
            }
            let created = cri::create(&mut rt, &pod, &early).await?;
            rt.update_container_resources(pb::UpdateContainerResourcesRequest {
                container_id: created.clone(),
                linux: Some(new.clone()),
                ..Default::default()
            })
            .await
            .context("UpdateContainerResources of a created container")?;
            cri::start(&mut rt, &created).await?;
            let got = limits(&created);
            ensure!(
                got == [
                    (128u64 << 20).to_string(),
                    shares_1024.into(),
                    "50000 100000".into()
                ],
                "cgroup of a container updated before its start: {got:?}"
            );
            let s = cri::status(&mut rt, &created).await?;
            let memory = s
                .resources
                .and_then(|r| r.linux)
                .map(|l| l.memory_limit_in_bytes);
            ensure!(memory == Some(128 << 20), "status resources: {memory:?}");
            cri::stop(&mut rt, &created, 0).await?;
            cri::stop(&mut rt, &id, 0).await?;
            let err = rt
                .update_container_resources(pb::UpdateContainerResourcesRequest {
                    container_id: id.clone(),
                    linux: Some(new),
                    ..Default::default()
                })
                .await
                .err()
                .context("UpdateContainerResources of an exited container succeeded")?;
            eprintln!("update of an exited container: {err:?}");
            cri::remove_pod(&mut rt, &pod.id).await?;
            Ok::<_, anyhow::Error>(())
        }),
    )?;
    cri::assert_clean(&d)
}

/// name, add, drop, privileged, expected CapEff and CapBnd.
type CapCase<'a> = (&'a str, Vec<&'a str>, Vec<&'a str>, bool, u64);

/// The bit mask of capability numbers.
fn caps(bits: &[u32]) -> u64 {
    bits.iter().fold(0, |m, b| m | (1u64 << b))
}

fn capabilities() -> Result<()> {
    let d = cri::daemon()?;
    let busybox = cri::import(&d, "busybox")?;
    // containerd's default set: CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID SETPCAP
    // NET_BIND_SERVICE NET_RAW SYS_CHROOT MKNOD AUDIT_WRITE SETFCAP.
    let default = caps(&[0, 1, 3, 4, 5, 6, 7, 8, 10, 13, 18, 27, 29, 31]);
    let own = std::fs::read_to_string("/proc/self/status")?;
    let host = own
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .context("own CapBnd")?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let mut cfg = cri::pod_config(&d, "caps");
            if let Some(sc) = cfg.linux.as_mut().and_then(|l| l.security_context.as_mut()) {
                sc.privileged = true;
            }
            let pod = cri::run_pod(&mut rt, cfg).await?;
            let script =
                "grep -E '^Cap(Eff|Bnd):' /proc/self/status; echo devices=$(ls /dev | wc -l)";
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
                let out = run_to_completion(&mut rt, &pod, &c).await?;
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
            Ok::<_, anyhow::Error>(())
        }),
    )?;
    cri::assert_clean(&d)
}
