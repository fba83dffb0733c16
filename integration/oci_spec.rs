//! The OCI spec builder against real runc: bundles from the test images, pod namespaces held
//! by an `unshare` process, containers run with `runc run` and checked from the inside.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use bosun::config::CgroupDriver;
use bosun::image::manifest::{ImageConfig, RunConfig};
use bosun::oci::caps::{ALL_CAPABILITIES, DEFAULT_CAPABILITIES};
use bosun::oci::{
    build_spec, ContainerRequest, HostFacts, MountRequest, SandboxContext, SecurityProfile,
    SpecOptions,
};

use crate::support::{images_dir, remove_cgroups, runc_bin, scratch, trial, wait_until, Need};

const NEEDS: &[Need] = &[Need::Root, Need::Runc, Need::Images];
const POD_HOSTNAME: &str = "bosun-pod";

type Test = fn() -> Result<()>;

const TESTS: &[(&str, Test)] = &[
    (
        "oci_spec::nonroot_user_resolves_with_its_groups",
        nonroot_user,
    ),
    (
        "oci_spec::no_new_privs_and_default_capabilities",
        nnp_and_caps,
    ),
    (
        "oci_spec::runtime_default_seccomp_blocks_unshare",
        seccomp_default,
    ),
    (
        "oci_spec::privileged_unconfined_may_mount_and_unshare",
        privileged,
    ),
    ("oci_spec::readonly_rootfs_refuses_writes", readonly_rootfs),
    ("oci_spec::masked_and_readonly_proc_paths", masked_paths),
    ("oci_spec::readonly_bind_mount_is_read_only", bind_mounts),
    (
        "oci_spec::env_cwd_and_pod_files_reach_the_process",
        env_and_pod_files,
    ),
    (
        "oci_spec::image_entrypoint_and_cmd_run_by_default",
        image_defaults,
    ),
    (
        "oci_spec::container_joins_the_pods_namespaces",
        joins_pod_namespaces,
    ),
];

pub fn trials() -> Vec<libtest_mimic::Trial> {
    TESTS
        .iter()
        .map(|(name, f)| trial(name, NEEDS, *f))
        .collect()
}

/// A pod's namespaces, held by `unshare --fork ... sleep` (pid 1 of the new pid namespace).
struct Pod {
    unshare: Child,
    holder: u32,
    files: tempfile::TempDir,
}

impl Pod {
    fn start() -> Result<Pod> {
        let files = scratch()?;
        std::fs::write(files.path().join("hostname"), format!("{POD_HOSTNAME}\n"))?;
        std::fs::write(
            files.path().join("hosts"),
            "127.0.0.1 localhost bosun-pod\n",
        )?;
        std::fs::write(files.path().join("resolv.conf"), "nameserver 192.0.2.53\n")?;
        std::fs::create_dir(files.path().join("shm"))?;
        let script = format!("echo {POD_HOSTNAME} > /proc/sys/kernel/hostname && exec sleep 600");
        let unshare = Command::new("unshare")
            .args(["--net", "--ipc", "--uts", "--pid", "--fork", "--kill-child"])
            .args(["/bin/sh", "-c", &script])
            .stdin(Stdio::null())
            .spawn()
            .context("spawn unshare")?;
        let mut pod = Pod {
            holder: 0,
            unshare,
            files,
        };
        let children = format!("/proc/{0}/task/{0}/children", pod.unshare.id());
        let mut holder = 0;
        let ready = wait_until(10, || {
            holder = std::fs::read_to_string(&children)
                .ok()
                .and_then(|s| s.split_whitespace().next().and_then(|p| p.parse().ok()))
                .unwrap_or(0);
            holder != 0
                && std::fs::read_to_string(format!("/proc/{holder}/comm"))
                    .is_ok_and(|c| c.trim() == "sleep")
        });
        ensure!(ready, "the pod's namespace holder did not start");
        pod.holder = holder;
        Ok(pod)
    }

    fn context(&self) -> SandboxContext {
        let ns = |n: &str| Some(PathBuf::from(format!("/proc/{}/ns/{n}", self.holder)));
        let file = |n: &str| Some(self.files.path().join(n));
        SandboxContext {
            id: "bosun-it-pod".into(),
            hostname: POD_HOSTNAME.into(),
            net_ns: ns("net"),
            ipc_ns: ns("ipc"),
            uts_ns: ns("uts"),
            pid_ns_holder: Some(self.holder),
            hosts_path: file("hosts"),
            hostname_path: file("hostname"),
            resolv_conf_path: file("resolv.conf"),
            shm_path: file("shm"),
            ..Default::default()
        }
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
    }
}

/// Removes the container (runc state and cgroups) even when the test fails.
struct ContainerGuard {
    runc: PathBuf,
    root: PathBuf,
    id: String,
}

impl Drop for ContainerGuard {
    fn drop(&mut self) {
        let _ = Command::new(&self.runc)
            .arg("--root")
            .arg(&self.root)
            .args(["delete", "--force", &self.id])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        remove_cgroups(&self.id);
    }
}

/// A bundle (`config.json` + `rootfs/`) unpacked from a test image's OCI layout.
struct Bundle {
    dir: tempfile::TempDir,
    run_config: RunConfig,
}

fn blob(layout: &Path, digest: &str) -> PathBuf {
    layout.join("blobs").join(digest.replacen(':', "/", 1))
}

fn json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    Ok(serde_json::from_str(&text)?)
}

fn bundle(image: &str) -> Result<Bundle> {
    let layout = images_dir().join(image);
    let index = json(&layout.join("index.json"))?;
    let manifest_digest = index["manifests"][0]["digest"]
        .as_str()
        .context("index digest")?;
    let manifest = json(&blob(&layout, manifest_digest))?;
    let config_digest = manifest["config"]["digest"]
        .as_str()
        .context("config digest")?;
    let config: ImageConfig =
        serde_json::from_str(&std::fs::read_to_string(blob(&layout, config_digest))?)?;
    let dir = scratch()?;
    let rootfs = dir.path().join("rootfs");
    std::fs::create_dir(&rootfs)?;
    for layer in manifest["layers"].as_array().context("layers")? {
        let digest = layer["digest"].as_str().context("layer digest")?;
        let status = Command::new("tar")
            .arg("-xzf")
            .arg(blob(&layout, digest))
            .arg("-C")
            .arg(&rootfs)
            .status()?;
        ensure!(status.success(), "tar -xzf {digest}: {status}");
    }
    Ok(Bundle {
        dir,
        run_config: config.config,
    })
}

/// What a container printed and how it ended.
struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

impl std::fmt::Display for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\nstdout:\n{}\nstderr:\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

fn request(command: &[&str]) -> ContainerRequest {
    ContainerRequest {
        name: "it".into(),
        image: "bosun.test/busybox:latest".into(),
        command: command.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// Builds the spec for `req` in `sandbox`, runs it with `runc run` and cleans up.
fn run(image: &str, req: &ContainerRequest, sandbox: &SandboxContext) -> Result<Ran> {
    let runc = runc_bin().context("runc")?;
    let b = bundle(image)?;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let id = format!(
        "bosun-it-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Relaxed)
    );
    let opts = SpecOptions {
        cgroup_driver: CgroupDriver::Cgroupfs,
        cgroups_path: format!("/{id}"),
        host: HostFacts::detect()?,
    };
    let spec = build_spec(
        req,
        sandbox,
        &b.run_config,
        &b.dir.path().join("rootfs"),
        &opts,
    )?;
    std::fs::write(
        b.dir.path().join("config.json"),
        serde_json::to_vec_pretty(&spec)?,
    )?;

    let state = b.dir.path().join("runc-state");
    let _guard = ContainerGuard {
        runc: runc.clone(),
        root: state.clone(),
        id: id.clone(),
    };
    let out_path = b.dir.path().join("stdout");
    let err_path = b.dir.path().join("stderr");
    let mut child = Command::new(&runc)
        .arg("--root")
        .arg(&state)
        .args(["run", "--bundle"])
        .arg(b.dir.path())
        .arg(&id)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path)?)
        .stderr(std::fs::File::create(&err_path)?)
        .spawn()
        .context("spawn runc run")?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("runc run {id} did not finish in 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok(Ran {
        code: status.code().unwrap_or(-1),
        stdout: std::fs::read_to_string(out_path)?,
        stderr: std::fs::read_to_string(err_path)?,
    })
}

fn sh(script: &str) -> ContainerRequest {
    request(&["sh", "-c", script])
}

fn nonroot_user() -> Result<()> {
    let pod = Pod::start()?;
    let ran = run("nonroot", &request(&["id"]), &pod.context())?;
    ensure!(ran.code == 0, "{ran}");
    for want in ["uid=1000(app)", "gid=1000(app)", "29(audio)", "1000(app)"] {
        ensure!(ran.stdout.contains(want), "{want} missing: {ran}");
    }
    Ok(())
}

fn cap_mask(names: &[&str]) -> u64 {
    ALL_CAPABILITIES
        .iter()
        .enumerate()
        .filter(|(_, c)| names.contains(c))
        .fold(0, |m, (bit, _)| m | 1 << bit)
}

fn status_field<'a>(status: &'a str, field: &str) -> &'a str {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .map(str::trim)
        .unwrap_or("")
}

fn nnp_and_caps() -> Result<()> {
    let pod = Pod::start()?;
    let mut req = request(&["cat", "/proc/self/status"]);
    req.linux.security.no_new_privs = true;
    let ran = run("busybox", &req, &pod.context())?;
    ensure!(ran.code == 0, "{ran}");
    let want = format!("{:016x}", cap_mask(&DEFAULT_CAPABILITIES));
    ensure!(status_field(&ran.stdout, "NoNewPrivs:") == "1", "{ran}");
    for field in ["CapEff:", "CapPrm:", "CapBnd:"] {
        ensure!(
            status_field(&ran.stdout, field) == want,
            "{field} != {want}: {ran}"
        );
    }
    ensure!(
        status_field(&ran.stdout, "Seccomp:") == "0",
        "unset seccomp: {ran}"
    );
    Ok(())
}

fn seccomp_default() -> Result<()> {
    let pod = Pod::start()?;
    let script = "grep Seccomp: /proc/self/status; unshare -U true && echo unshared";
    let mut req = sh(script);
    req.linux.security.seccomp = SecurityProfile::RuntimeDefault;
    let ran = run("busybox", &req, &pod.context())?;
    ensure!(
        ran.stdout.contains("Seccomp:\t2"),
        "filter not installed: {ran}"
    );
    ensure!(
        !ran.stdout.contains("unshared"),
        "unshare passed the filter: {ran}"
    );
    ensure!(
        ran.stderr.contains("Operation not permitted"),
        "not EPERM: {ran}"
    );

    // The same capabilities without the filter: the refusal above came from seccomp.
    req.linux.security.seccomp = SecurityProfile::Unconfined;
    let ran = run("busybox", &req, &pod.context())?;
    ensure!(
        ran.stdout.contains("Seccomp:\t0") && ran.stdout.contains("unshared"),
        "{ran}"
    );
    Ok(())
}

fn privileged() -> Result<()> {
    let pod = Pod::start()?;
    let sandbox = SandboxContext {
        privileged: true,
        ..pod.context()
    };
    let script = "mkdir -p /tmp/m && mount -t tmpfs x /tmp/m && echo mounted \
                  && unshare -U true && echo unshared";
    let mut req = sh(script);
    req.linux.security.privileged = true;
    req.linux.security.seccomp = SecurityProfile::Unconfined;
    let ran = run("busybox", &req, &sandbox)?;
    ensure!(ran.code == 0, "{ran}");
    ensure!(ran.stdout.contains("mounted\nunshared"), "{ran}");
    // RuntimeDefault is not applied to privileged containers either.
    req.linux.security.seccomp = SecurityProfile::RuntimeDefault;
    let ran = run("busybox", &req, &sandbox)?;
    ensure!(ran.code == 0 && ran.stdout.contains("unshared"), "{ran}");
    Ok(())
}

fn readonly_rootfs() -> Result<()> {
    let pod = Pod::start()?;
    let mut req = sh("touch /dev/shm/ok && echo shm-ok; touch /x && echo wrote-rootfs");
    req.linux.security.readonly_rootfs = true;
    let ran = run("busybox", &req, &pod.context())?;
    ensure!(
        ran.stdout.contains("shm-ok"),
        "pod shm must stay writable: {ran}"
    );
    ensure!(!ran.stdout.contains("wrote-rootfs"), "{ran}");
    ensure!(ran.stderr.contains("Read-only file system"), "{ran}");
    ensure!(
        pod.files.path().join("shm/ok").exists(),
        "the pod's shm is the host dir"
    );
    Ok(())
}

fn masked_paths() -> Result<()> {
    let pod = Pod::start()?;
    // Masked files become /dev/null; masked directories an empty read-only tmpfs. Which of the
    // default paths exist depends on the kernel (this VM's has no /proc/kcore).
    let script = "for f in /proc/kcore /proc/timer_list /proc/keys; do \
                    [ -e $f ] && echo $f=$(wc -c < $f); done; \
                  echo firmware=$(ls /sys/firmware | wc -l); \
                  echo x > /proc/sys/kernel/domainname && echo wrote-proc-sys";
    let ran = run("busybox", &sh(script), &pod.context())?;
    let mut checked = 0;
    for f in ["/proc/kcore", "/proc/timer_list", "/proc/keys"] {
        let host_size = std::fs::read(f).map(|b| b.len()).unwrap_or(0);
        if host_size > 0 {
            checked += 1;
            ensure!(
                ran.stdout.contains(&format!("{f}=0\n")),
                "{f} is not masked: {ran}"
            );
        }
    }
    ensure!(
        checked > 0,
        "no masked /proc file has content on this host to compare with"
    );
    ensure!(
        ran.stdout.contains("firmware=0"),
        "/sys/firmware must look empty: {ran}"
    );
    ensure!(!ran.stdout.contains("wrote-proc-sys"), "{ran}");
    ensure!(ran.stderr.contains("Read-only file system"), "{ran}");
    Ok(())
}

fn bind_mounts() -> Result<()> {
    let pod = Pod::start()?;
    let host = scratch()?;
    std::fs::write(host.path().join("f"), "hello\n")?;
    let mut req = sh("cat /data/f; touch /data/new && echo wrote-ro; echo out > /rw/made");
    req.mounts = vec![
        MountRequest {
            container_path: "/data".into(),
            host_path: host.path().display().to_string(),
            readonly: true,
            ..Default::default()
        },
        MountRequest {
            container_path: "/rw".into(),
            host_path: host.path().join("rw-created").display().to_string(),
            ..Default::default()
        },
    ];
    let ran = run("busybox", &req, &pod.context())?;
    ensure!(ran.stdout.contains("hello"), "{ran}");
    ensure!(!ran.stdout.contains("wrote-ro"), "{ran}");
    ensure!(ran.stderr.contains("Read-only file system"), "{ran}");
    let made = std::fs::read_to_string(host.path().join("rw-created/made"))?;
    ensure!(
        made == "out\n",
        "the rw mount's host dir was created and written: {made:?}"
    );
    Ok(())
}

fn env_and_pod_files() -> Result<()> {
    let pod = Pod::start()?;
    let mut req = sh(
        "echo \"$FOO|$HOSTNAME|$(pwd)|$(hostname)|$(cat /etc/hostname)|\
                      $(cat /etc/resolv.conf)\"",
    );
    req.envs = vec![("FOO".into(), b"from-cri".to_vec())];
    let ran = run("entrypoint", &req, &pod.context())?;
    ensure!(ran.code == 0, "{ran}");
    let want =
        format!("from-cri|{POD_HOSTNAME}|/tmp|{POD_HOSTNAME}|{POD_HOSTNAME}|nameserver 192.0.2.53");
    ensure!(ran.stdout.trim() == want, "want {want}: {ran}");
    Ok(())
}

fn image_defaults() -> Result<()> {
    let pod = Pod::start()?;
    let ran = run("entrypoint", &request(&[]), &pod.context())?;
    ensure!(ran.code == 0 && ran.stdout == "entry cmd\n", "{ran}");
    let mut req = request(&[]);
    req.args = vec!["only-args".into()];
    let ran = run("entrypoint", &req, &pod.context())?;
    ensure!(ran.stdout == "entry only-args\n", "{ran}");
    Ok(())
}

fn joins_pod_namespaces() -> Result<()> {
    let pod = Pod::start()?;
    let ran = run(
        "busybox",
        &sh("for n in net ipc uts pid; do readlink /proc/self/ns/$n; done; echo pid=$$"),
        &pod.context(),
    )?;
    ensure!(ran.code == 0, "{ran}");
    for n in ["net", "ipc", "uts", "pid"] {
        let want = std::fs::read_link(format!("/proc/{}/ns/{n}", pod.holder))?;
        let want = want.display().to_string();
        ensure!(ran.stdout.contains(&want), "{n}: want {want}: {ran}");
    }
    ensure!(
        !ran.stdout.contains("pid=1\n"),
        "the pod's holder is pid 1, not the container"
    );
    Ok(())
}
