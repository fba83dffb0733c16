//! The hostile-request table: every RPC and field family (ids, names, namespaces, uids,
//! hostnames, paths, log paths, DNS, ports, enums, sysctls, cgroup parents, resources,
//! mounts, devices, environment, commands, security, sizes, images, exec, streaming,
//! timeouts), each with the code and the field its answer must name.

use bosun::proto::runtime::v1 as pb;
use tonic::Code;

use crate::support::cri::{self, Pod};
use crate::support::{cgroup, Daemon};

/// One request.
#[derive(Debug, Clone)]
pub enum Call {
    RunPod(Box<pb::RunPodSandboxRequest>),
    StopPod(String),
    RemovePod(String),
    PodStatus(String),
    PodStats(String),
    ListPods(pb::PodSandboxFilter),
    Create(Box<pb::CreateContainerRequest>),
    Start(String),
    Stop(String, i64),
    Remove(String),
    Status(String),
    Stats(String),
    ListContainers(pb::ContainerFilter),
    Update(pb::UpdateContainerResourcesRequest),
    Reopen(String),
    ExecSync(pb::ExecSyncRequest),
    Exec(pb::ExecRequest),
    Attach(pb::AttachRequest),
    PortForward(pb::PortForwardRequest),
    UpdateRuntimeConfig(String),
    Pull(String),
    ImageStatus(String),
    RemoveImage(String),
}

/// The answer a case wants.
#[derive(Debug, Clone)]
pub enum Expect {
    /// Success (idempotent calls on unknown objects, valid edge values, absent images).
    Ok,
    /// This code, the message naming each of these.
    Code(Code, &'static [&'static str]),
}

/// One row of the table.
#[derive(Debug, Clone)]
pub struct Case {
    pub what: String,
    pub call: Call,
    pub expect: Expect,
}

fn case(what: impl Into<String>, call: Call, expect: Expect) -> Case {
    Case {
        what: what.into(),
        call,
        expect,
    }
}

fn invalid(needles: &'static [&'static str]) -> Expect {
    Expect::Code(Code::InvalidArgument, needles)
}

fn not_found(needles: &'static [&'static str]) -> Expect {
    Expect::Code(Code::NotFound, needles)
}

/// 64 KiB of `c`.
fn huge(c: char) -> String {
    c.to_string().repeat(64 << 10)
}

/// The table, for a daemon `d` with a ready `pod`, a `running` container, image `busybox`.
pub fn cases(d: &Daemon, pod: &Pod, running: &str, busybox: &str) -> Vec<Case> {
    let mut out = Vec::new();
    ids(&mut out);
    sandboxes(&mut out, d);
    containers(&mut out, pod, busybox);
    resources(&mut out, pod, busybox, running);
    images_and_exec(&mut out, running, &pod.id);
    out
}

/// Empty, 64 KiB and NUL-bearing ids for every RPC that takes one; the idempotent ones
/// (Stop/Remove) succeed for unknown ids.
fn ids(out: &mut Vec<Case>) {
    type Make = fn(String) -> Call;
    let update: Make = |id| {
        Call::Update(pb::UpdateContainerResourcesRequest {
            container_id: id,
            linux: Some(Default::default()),
            ..Default::default()
        })
    };
    let rpcs: [(&str, Make, bool); 11] = [
        ("StartContainer", Call::Start, false),
        ("StopContainer", |id| Call::Stop(id, 0), true),
        ("RemoveContainer", Call::Remove, true),
        ("ContainerStatus", Call::Status, false),
        ("ContainerStats", Call::Stats, false),
        ("ReopenContainerLog", Call::Reopen, false),
        ("UpdateContainerResources", update, false),
        ("StopPodSandbox", Call::StopPod, true),
        ("RemovePodSandbox", Call::RemovePod, true),
        ("PodSandboxStatus", Call::PodStatus, false),
        ("PodSandboxStats", Call::PodStats, false),
    ];
    for (rpc, make, idempotent) in rpcs {
        let (long, nul) = if idempotent {
            (Expect::Ok, Expect::Ok)
        } else {
            (
                not_found(&["more bytes]", "not found"]),
                not_found(&["not found"]),
            )
        };
        out.push(case(
            format!("{rpc}: empty id"),
            make(String::new()),
            invalid(&["id"]),
        ));
        out.push(case(format!("{rpc}: 64 KiB id"), make(huge('f')), long));
        out.push(case(
            format!("{rpc}: id with NUL"),
            make("ab\0cd".into()),
            nul,
        ));
    }
}

fn run(config: pb::PodSandboxConfig, handler: &str) -> Call {
    Call::RunPod(Box::new(pb::RunPodSandboxRequest {
        config: Some(config),
        runtime_handler: handler.into(),
    }))
}

fn dns(servers: &[&str], searches: &[&str], options: &[&str]) -> Option<pb::DnsConfig> {
    let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
    Some(pb::DnsConfig {
        servers: v(servers),
        searches: v(searches),
        options: v(options),
    })
}

fn tcp(container_port: i32, host_port: i32) -> pb::PortMapping {
    pb::PortMapping {
        container_port,
        host_port,
        ..Default::default()
    }
}

/// RunPodSandbox: metadata, hostname, log directory, DNS, ports, enums, sysctls, cgroups,
/// sizes, handler.
fn sandboxes(out: &mut Vec<Case>, d: &Daemon) {
    let good = cri::pod_config(d, "hostile-pod");
    let with = |f: &dyn Fn(&mut pb::PodSandboxConfig)| {
        let mut c = good.clone();
        f(&mut c);
        c
    };
    let meta = |f: &dyn Fn(&mut pb::PodSandboxMetadata)| {
        with(&|c| f(c.metadata.get_or_insert_with(Default::default)))
    };
    let linux = |f: &dyn Fn(&mut pb::LinuxPodSandboxConfig)| {
        with(&|c| f(c.linux.get_or_insert_with(Default::default)))
    };
    // What is wrong with a parent depends on the daemon's cgroup driver (paths or slices).
    let (not_parent, other_driver): ([&'static [&'static str]; 2], &str) = match cgroup::driver() {
        cgroup::Driver::Cgroupfs => (
            [&["cgroup_parent", "absolute"], &["cgroup_parent", "'..'"]],
            "kubepods-burstable.slice",
        ),
        cgroup::Driver::Systemd => (
            [&["cgroup_parent", "slice"], &["cgroup_parent", "slice"]],
            "/kubepods/burstable",
        ),
    };
    let ns = |f: &dyn Fn(&mut pb::NamespaceOption)| {
        linux(&|l| {
            let sc = l.security_context.get_or_insert_with(Default::default);
            f(sc.namespace_options.get_or_insert_with(Default::default))
        })
    };
    let port = |p: pb::PortMapping| with(&|c| c.port_mappings = vec![p.clone()]);
    let userns = pb::UserNamespace {
        mode: pb::NamespaceMode::Pod as i32,
        ..Default::default()
    };
    #[rustfmt::skip]
    let rows: Vec<(&str, pb::PodSandboxConfig, Expect)> = vec![
        ("name of 254 bytes", meta(&|m| m.name = "n".repeat(254)), invalid(&["metadata.name", "at most 253"])),
        ("name of 64 KiB", meta(&|m| m.name = huge('n')), invalid(&["metadata.name", "more bytes]"])),
        ("name with ';' and '=' (CNI_ARGS)", meta(&|m| m.name = "a;K8S_POD_NAMESPACE=x".into()), invalid(&["metadata.name", "';'"])),
        ("name with '/'", meta(&|m| m.name = "../../etc".into()), invalid(&["metadata.name"])),
        ("name with a newline", meta(&|m| m.name = "a\nb".into()), invalid(&["metadata.name"])),
        ("name with NUL", meta(&|m| m.name = "a\0b".into()), invalid(&["metadata.name"])),
        ("name with non-ASCII", meta(&|m| m.name = "pód".into()), invalid(&["metadata.name"])),
        ("empty name", meta(&|m| m.name.clear()), invalid(&["metadata.name"])),
        ("namespace of 64 bytes", meta(&|m| m.namespace = "s".repeat(64)), invalid(&["metadata.namespace", "at most 63"])),
        ("namespace with a space", meta(&|m| m.namespace = "a b".into()), invalid(&["metadata.namespace"])),
        ("uid of 64 KiB", meta(&|m| m.uid = huge('u')), invalid(&["metadata.uid", "at most 63"])),
        ("uid with '='", meta(&|m| m.uid = "u=1".into()), invalid(&["metadata.uid"])),
        ("no metadata", with(&|c| c.metadata = None), invalid(&["metadata"])),
        ("hostname of 65 bytes", with(&|c| c.hostname = "h".repeat(65)), invalid(&["hostname"])),
        ("hostname with '_'", with(&|c| c.hostname = "a_b".into()), invalid(&["hostname"])),
        ("hostname with NUL", with(&|c| c.hostname = "a\0b".into()), invalid(&["hostname"])),
        ("relative log_directory", with(&|c| c.log_directory = "logs/pod".into()), invalid(&["log_directory", "absolute"])),
        ("log_directory with NUL", with(&|c| c.log_directory = "/tmp/a\0b".into()), invalid(&["log_directory", "NUL"])),
        ("log_directory with a 300-byte component", with(&|c| c.log_directory = format!("/tmp/{}", "l".repeat(300))), invalid(&["log_directory", "at most 255"])),
        ("DNS server that is no address", with(&|c| c.dns_config = dns(&["ns1.example"], &[], &[])), invalid(&["dns_config", "server"])),
        ("DNS option injecting a line", with(&|c| c.dns_config = dns(&[], &[], &["ndots:1\nnameserver 6.6.6.6"])), invalid(&["dns_config", "option"])),
        ("DNS search with a space", with(&|c| c.dns_config = dns(&[], &["a b"], &[])), invalid(&["dns_config", "search"])),
        ("container_port 70000", port(tcp(70000, 0)), invalid(&["port_mappings[0].container_port", "1-65535"])),
        ("container_port -1", port(tcp(-1, 0)), invalid(&["port_mappings[0].container_port"])),
        ("container_port 0", port(tcp(0, 8080)), invalid(&["port_mappings[0].container_port"])),
        ("host_port 70000", port(tcp(80, 70000)), invalid(&["port_mappings[0].host_port", "1-65535"])),
        ("host_port -5", port(tcp(80, -5)), invalid(&["port_mappings[0].host_port"])),
        ("host_ip garbage", port(pb::PortMapping { host_ip: "garbage".into(), ..tcp(80, 8080) }), invalid(&["port_mappings[0].host_ip"])),
        ("protocol 99", port(pb::PortMapping { protocol: 99, ..tcp(80, 8080) }), invalid(&["port_mappings[0].protocol", "99"])),
        ("network namespace mode 99", ns(&|n| n.network = 99), invalid(&["namespace_options.network", "99"])),
        ("pid namespace mode 99", ns(&|n| n.pid = 99), invalid(&["namespace_options.pid", "99"])),
        ("ipc namespace mode 99", ns(&|n| n.ipc = 99), invalid(&["namespace_options.ipc", "99"])),
        ("pid namespace TARGET", ns(&|n| n.pid = pb::NamespaceMode::Target as i32), invalid(&["pid namespace mode TARGET"])),
        ("user namespace", ns(&|n| n.userns_options = Some(userns.clone())), invalid(&["userns_options"])),
        ("host sysctl kernel.panic", linux(&|l| l.sysctls = cri::map(&[("kernel.panic", "1")])), invalid(&["kernel.panic", "not namespaced"])),
        ("sysctl value of two lines", linux(&|l| l.sysctls = cri::map(&[("net.ipv4.ip_forward", "1\n0")])), invalid(&["net.ipv4.ip_forward", "one line"])),
        ("sysctl escaping /proc/sys", linux(&|l| l.sysctls = cri::map(&[("net/../../kernel/panic", "1")])), invalid(&["sysctl"])),
        ("relative cgroup_parent", linux(&|l| l.cgroup_parent = "kubepods".into()), invalid(not_parent[0])),
        ("cgroup_parent with '..'", linux(&|l| l.cgroup_parent = "/kubepods/../../../sys".into()), invalid(not_parent[1])),
        ("cgroup_parent with ':'", linux(&|l| l.cgroup_parent = "/a:b".into()), invalid(&["cgroup_parent"])),
        ("cgroup_parent of the other driver", linux(&|l| l.cgroup_parent = other_driver.into()), invalid(&["cgroup_parent", "cgroupDriver"])),
        ("annotations of 1 MiB", with(&|c| c.annotations = cri::map(&[("big", &"a".repeat(1 << 20))])), invalid(&["annotations", "at most"])),
        ("labels of 100 KiB", with(&|c| c.labels = cri::map(&[("big", &"l".repeat(100 << 10))])), invalid(&["labels", "at most"])),
    ];
    for (what, config, expect) in rows {
        out.push(case(
            format!("RunPodSandbox: {what}"),
            run(config, ""),
            expect,
        ));
    }
    let handler = invalid(&["runtime handler", "more bytes]"]);
    out.push(case(
        "RunPodSandbox: 64 KiB runtime handler",
        run(good, &huge('k')),
        handler,
    ));
    let none = Call::RunPod(Box::default());
    out.push(case("RunPodSandbox: no config", none, invalid(&["config"])));
}

fn create(pod: &Pod, c: pb::ContainerConfig) -> Call {
    Call::Create(Box::new(pb::CreateContainerRequest {
        pod_sandbox_id: pod.id.clone(),
        config: Some(c),
        sandbox_config: Some(pod.config.clone()),
    }))
}

fn mount(host: &str, container: &str) -> pb::Mount {
    pb::Mount {
        host_path: host.into(),
        container_path: container.into(),
        ..Default::default()
    }
}

fn device(host: &str, container: &str, permissions: &str) -> pb::Device {
    pb::Device {
        host_path: host.into(),
        container_path: container.into(),
        permissions: permissions.into(),
    }
}

fn image(name: &str) -> Option<pb::ImageSpec> {
    Some(pb::ImageSpec {
        image: name.into(),
        ..Default::default()
    })
}

/// CreateContainer: names, log paths, commands, environment, mounts, devices, security.
fn containers(out: &mut Vec<Case>, pod: &Pod, busybox: &str) {
    let base = cri::sh_config(pod, "hostile-c", busybox, "exit 0");
    let with = |f: &dyn Fn(&mut pb::ContainerConfig)| {
        let mut c = base.clone();
        f(&mut c);
        c
    };
    let named = |name: String| {
        with(&|c| {
            c.metadata = Some(pb::ContainerMetadata {
                name: name.clone(),
                attempt: 0,
            })
        })
    };
    let mounts = |m: pb::Mount| with(&|c| c.mounts = vec![m.clone()]);
    let devices = |d: pb::Device| with(&|c| c.devices = vec![d.clone()]);
    let sec = |f: &dyn Fn(&mut pb::LinuxContainerSecurityContext)| with(&|c| f(cri::security(c)));
    let id = |v: i64| Some(pb::Int64Value { value: v });
    let escape = format!("{}victim", "../".repeat(16));
    let bogus_cap = pb::Capability {
        add_capabilities: vec!["CAP_BOGUS".into()],
        ..Default::default()
    };
    let target = pb::NamespaceOption {
        pid: pb::NamespaceMode::Target as i32,
        target_id: "feedface".into(),
        ..Default::default()
    };
    let idmap = vec![pb::IdMapping {
        host_id: 1,
        container_id: 0,
        length: 1,
    }];
    #[rustfmt::skip]
    let rows: Vec<(&str, pb::ContainerConfig, Expect)> = vec![
        ("name of 64 KiB", named(huge('c')), invalid(&["metadata.name", "more bytes]"])),
        ("name with '/'", named("a/b".into()), invalid(&["metadata.name"])),
        ("no metadata", with(&|c| c.metadata = None), invalid(&["metadata"])),
        ("log_path ../../etc/passwd", with(&|c| c.log_path = "../../etc/passwd".into()), invalid(&["log_path", "'..'"])),
        ("log_path of sixteen ../", with(&|c| c.log_path = escape.clone()), invalid(&["log_path"])),
        ("absolute log_path with a log_directory", with(&|c| c.log_path = "/etc/passwd".into()), invalid(&["log_path", "not absolute"])),
        ("log_path with NUL", with(&|c| c.log_path = "a\0.log".into()), invalid(&["log_path", "NUL"])),
        ("log_path with a 300-byte component", with(&|c| c.log_path = format!("{}.log", "p".repeat(300))), invalid(&["log_path", "at most 255"])),
        ("log_path of 64 KiB", with(&|c| c.log_path = "x/".repeat(32 << 10)), invalid(&["log_path", "more bytes]"])),
        ("command with NUL", with(&|c| c.command = vec!["sh".into(), "-c\0x".into()]), invalid(&["command[1]", "NUL"])),
        ("args with NUL", with(&|c| c.args = vec!["a\0".into()]), invalid(&["args[0]", "NUL"])),
        ("env key with '='", with(&|c| c.envs = vec![cri::env("A=B", "v")]), invalid(&["envs[0].key"])),
        ("empty env key", with(&|c| c.envs = vec![cri::env("", "v")]), invalid(&["envs[0].key"])),
        ("env value with NUL", with(&|c| c.envs = vec![cri::env("A", "v\0w")]), invalid(&["envs[0].value"])),
        ("working_dir with NUL", with(&|c| c.working_dir = "/a\0".into()), invalid(&["working_dir", "NUL"])),
        ("relative mount container_path", mounts(mount("/tmp", "data")), invalid(&["mounts[0].container_path", "absolute"])),
        ("relative mount host_path", mounts(mount("tmp", "/data")), invalid(&["mounts[0].host_path", "absolute"])),
        ("mount host_path with NUL", mounts(mount("/tmp/a\0b", "/data")), invalid(&["mounts[0].host_path", "NUL"])),
        ("mount host_path with a 300-byte component", mounts(mount(&format!("/tmp/{}", "m".repeat(300)), "/data")), invalid(&["mounts[0].host_path", "at most 255"])),
        ("mount propagation 99", mounts(pb::Mount { propagation: 99, ..mount("/tmp", "/data") }), invalid(&["mounts[0].propagation", "99"])),
        ("image volume mount", mounts(pb::Mount { image: image("busybox"), ..mount("", "/data") }), Expect::Code(Code::Unimplemented, &["image volumes"])),
        ("ID-mapped mount", mounts(pb::Mount { uid_mappings: idmap.clone(), ..mount("/tmp", "/data") }), invalid(&["mounts[0]", "ID-mapped"])),
        ("device that does not exist", devices(device("/dev/no-such-device", "/dev/x", "rwm")), invalid(&["/dev/no-such-device"])),
        ("device path with NUL", devices(device("/dev/null\0", "/dev/x", "rwm")), invalid(&["devices[0].host_path", "NUL"])),
        ("device permissions xyz", devices(device("/dev/null", "/dev/x", "xyz")), invalid(&["xyz"])),
        ("CDI device", with(&|c| c.cdi_devices = vec![pb::CdiDevice { name: "vendor.com/gpu=0".into() }]), invalid(&["CDI"])),
        ("capability CAP_BOGUS", sec(&|s| s.capabilities = Some(bogus_cap.clone())), invalid(&["CAP_BOGUS"])),
        ("run_as_user -1", sec(&|s| s.run_as_user = id(-1)), invalid(&["run_as_user"])),
        ("run_as_user 2^40", sec(&|s| s.run_as_user = id(1 << 40)), invalid(&["run_as_user"])),
        ("run_as_group without a user", sec(&|s| s.run_as_group = id(5)), invalid(&["run_as_group"])),
        ("supplemental group -7", sec(&|s| s.supplemental_groups = vec![-7]), invalid(&["supplemental_groups"])),
        ("supplemental groups policy 99", sec(&|s| s.supplemental_groups_policy = 99), invalid(&["supplemental_groups_policy", "99"])),
        ("seccomp profile type 99", sec(&|s| s.seccomp = Some(pb::SecurityProfile { profile_type: 99, ..Default::default() })), invalid(&["seccomp", "99"])),
        ("seccomp Localhost without a path", sec(&|s| s.seccomp = Some(pb::SecurityProfile { profile_type: 2, ..Default::default() })), invalid(&["seccomp", "localhost_ref"])),
        ("container pid namespace mode 99", sec(&|s| s.namespace_options = Some(pb::NamespaceOption { pid: 99, ..Default::default() })), invalid(&["namespace_options.pid", "99"])),
        ("pid TARGET naming no container", sec(&|s| s.namespace_options = Some(target.clone())), not_found(&["feedface"])),
        ("annotations of 1 MiB", with(&|c| c.annotations = cri::map(&[("big", &"a".repeat(1 << 20))])), invalid(&["annotations"])),
        ("no image", with(&|c| c.image = None), invalid(&["image"])),
        ("an image that is not there", with(&|c| c.image = image("bosun.test/nothing-here:latest")), not_found(&["nothing-here"])),
        ("an image reference of 64 KiB", with(&|c| c.image = image(&huge('i'))), not_found(&["more bytes]"])),
    ];
    for (what, config, expect) in rows {
        out.push(case(
            format!("CreateContainer: {what}"),
            create(pod, config),
            expect,
        ));
    }
    let empty = pb::CreateContainerRequest {
        pod_sandbox_id: pod.id.clone(),
        ..Default::default()
    };
    let no_config = invalid(&["config"]);
    out.push(case(
        "CreateContainer: no config",
        Call::Create(Box::new(empty)),
        no_config,
    ));
    let unknown = Pod {
        id: huge('a'),
        config: pod.config.clone(),
    };
    let sandbox = not_found(&["sandbox", "more bytes]"]);
    let call = create(&unknown, base);
    out.push(case(
        "CreateContainer: unknown 64 KiB sandbox id",
        call,
        sandbox,
    ));
}

/// Resources at CreateContainer and UpdateContainerResources.
fn resources(out: &mut Vec<Case>, pod: &Pod, busybox: &str, running: &str) {
    type R = pb::LinuxContainerResources;
    let base = cri::sh_config(pod, "hostile-r", busybox, "exit 0");
    let huge_page = vec![pb::HugepageLimit {
        page_size: "3XB".into(),
        limit: 1,
    }];
    #[rustfmt::skip]
    let rows: Vec<(&str, R, &'static [&'static str])> = vec![
        ("cpu_shares i64::MAX", R { cpu_shares: i64::MAX, ..Default::default() }, &["cpu_shares", "2-262144"]),
        ("cpu_shares 1", R { cpu_shares: 1, ..Default::default() }, &["cpu_shares", "2-262144"]),
        ("cpu_shares -3", R { cpu_shares: -3, ..Default::default() }, &["cpu_shares"]),
        ("cpu_quota i64::MAX", R { cpu_quota: i64::MAX, ..Default::default() }, &["cpu_quota", "-1 for none"]),
        ("cpu_quota -5", R { cpu_quota: -5, ..Default::default() }, &["cpu_quota"]),
        ("cpu_period 10^12", R { cpu_period: 1_000_000_000_000, ..Default::default() }, &["cpu_period", "1000-1000000"]),
        ("cpuset_cpus 9999", R { cpuset_cpus: "9999".into(), ..Default::default() }, &["cpuset_cpus", "not online"]),
        ("cpuset_cpus garbage", R { cpuset_cpus: "garbage".into(), ..Default::default() }, &["cpuset_cpus", "not a number"]),
        ("cpuset_cpus 0-4294967295", R { cpuset_cpus: "0-4294967295".into(), ..Default::default() }, &["cpuset_cpus"]),
        ("cpuset_mems 9", R { cpuset_mems: "9".into(), ..Default::default() }, &["cpuset_mems", "not online"]),
        ("memory -5", R { memory_limit_in_bytes: -5, ..Default::default() }, &["memory_limit_in_bytes"]),
        ("memory_swap -5", R { memory_swap_limit_in_bytes: -5, ..Default::default() }, &["memory_swap_limit_in_bytes"]),
        ("swap below memory", R { memory_limit_in_bytes: 64 << 20, memory_swap_limit_in_bytes: 1 << 20, ..Default::default() }, &["memory_swap_limit_in_bytes", "below"]),
        ("oom_score_adj 5000", R { oom_score_adj: 5000, ..Default::default() }, &["oom_score_adj", "-1000-1000"]),
        ("hugepage size 3XB", R { hugepage_limits: huge_page.clone(), ..Default::default() }, &["page_size"]),
        ("unified ../release_agent", R { unified: cri::map(&[("../release_agent", "x")]), ..Default::default() }, &["unified"]),
    ];
    for (what, r, needles) in rows {
        let mut c = base.clone();
        *cri::resources(&mut c) = r.clone();
        let call = create(pod, c);
        out.push(case(
            format!("CreateContainer: {what}"),
            call,
            invalid(needles),
        ));
        let update = pb::UpdateContainerResourcesRequest {
            container_id: running.to_string(),
            linux: Some(r),
            ..Default::default()
        };
        let call = Call::Update(update);
        out.push(case(
            format!("UpdateContainerResources: {what}"),
            call,
            invalid(needles),
        ));
    }
    let bare = pb::UpdateContainerResourcesRequest {
        container_id: running.to_string(),
        ..Default::default()
    };
    out.push(case(
        "UpdateContainerResources: no linux",
        Call::Update(bare),
        invalid(&["linux"]),
    ));
}

/// Images, exec, streaming, filters, the pod CIDR, timeouts.
fn images_and_exec(out: &mut Vec<Case>, running: &str, pod: &str) {
    for (what, image, expect) in [
        ("empty", String::new(), invalid(&["image"])),
        (
            "in upper case",
            "Busy/Box".to_string(),
            invalid(&["image reference", "lowercase"]),
        ),
        (
            "of 64 KiB",
            huge('b'),
            invalid(&["image reference", "more bytes]"]),
        ),
        (
            "with NUL",
            "busy\0box".to_string(),
            invalid(&["image reference"]),
        ),
        (
            "of too many colons",
            "a:b:c:d".to_string(),
            invalid(&["image reference"]),
        ),
    ] {
        out.push(case(
            format!("PullImage: reference {what}"),
            Call::Pull(image.clone()),
            expect.clone(),
        ));
        // No image can have such a name: ImageStatus answers "absent" (OK, empty) and
        // RemoveImage succeeds, as for any absent image (CRI); an empty one is refused.
        let absent = if image.is_empty() { expect } else { Expect::Ok };
        let status = Call::ImageStatus(image.clone());
        out.push(case(
            format!("ImageStatus: reference {what}"),
            status,
            absent.clone(),
        ));
        out.push(case(
            format!("RemoveImage: reference {what}"),
            Call::RemoveImage(image),
            absent,
        ));
    }
    let exec_sync = |cmd: &[&str], timeout| {
        Call::ExecSync(pb::ExecSyncRequest {
            container_id: running.to_string(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            timeout,
        })
    };
    let exec = |cmd: &[&str], tty, stdout, stderr| {
        Call::Exec(pb::ExecRequest {
            container_id: running.to_string(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            tty,
            stdin: false,
            stdout,
            stderr,
        })
    };
    let attach = pb::AttachRequest {
        container_id: huge('a'),
        stdout: true,
        ..Default::default()
    };
    let forward = |port| {
        Call::PortForward(pb::PortForwardRequest {
            pod_sandbox_id: pod.to_string(),
            port: vec![port],
        })
    };
    let state9 = pb::ContainerFilter {
        state: Some(pb::ContainerStateValue { state: 9 }),
        ..Default::default()
    };
    let pod_state9 = pb::PodSandboxFilter {
        state: Some(pb::PodSandboxStateValue { state: 9 }),
        ..Default::default()
    };
    let long_filter = pb::ContainerFilter {
        id: huge('e'),
        label_selector: cri::map(&[("k", &huge('v'))]),
        ..Default::default()
    };
    let unknown = "0123abcd".to_string();
    #[rustfmt::skip]
    let rows: Vec<(&str, Call, Expect)> = vec![
        ("ExecSync: no cmd", exec_sync(&[], 5), invalid(&["cmd"])),
        ("ExecSync: cmd with NUL", exec_sync(&["echo", "a\0b"], 5), invalid(&["cmd[1]", "NUL"])),
        ("ExecSync: timeout -1", exec_sync(&["true"], -1), invalid(&["timeout"])),
        ("ExecSync: timeout i64::MAX", exec_sync(&["true"], i64::MAX), Expect::Ok),
        ("StopContainer: unknown id, timeout i64::MAX", Call::Stop(unknown.clone(), i64::MAX), Expect::Ok),
        ("StopContainer: unknown id, timeout i64::MIN", Call::Stop(unknown, i64::MIN), Expect::Ok),
        ("Exec: no stream", exec(&["sh"], false, false, false), invalid(&["stdin, stdout or stderr"])),
        ("Exec: tty and stderr", exec(&["sh"], true, true, true), invalid(&["tty and stderr"])),
        ("Exec: no cmd", exec(&[], false, true, false), invalid(&["cmd"])),
        ("Attach: unknown 64 KiB container", Call::Attach(attach), not_found(&["more bytes]"])),
        ("PortForward: port 70000", forward(70000), invalid(&["port"])),
        ("PortForward: port -1", forward(-1), invalid(&["port"])),
        ("PortForward: port 0", forward(0), invalid(&["port"])),
        ("ListContainers: state 9", Call::ListContainers(state9), invalid(&["state"])),
        ("ListPodSandbox: state 9", Call::ListPods(pod_state9), invalid(&["state"])),
        ("ListContainers: 64 KiB id and label filters", Call::ListContainers(long_filter), Expect::Ok),
        ("UpdateRuntimeConfig: pod CIDR garbage", Call::UpdateRuntimeConfig("garbage".into()), invalid(&["garbage"])),
        ("UpdateRuntimeConfig: pod CIDR of 64 KiB", Call::UpdateRuntimeConfig(huge('9')), invalid(&["more bytes]"])),
    ];
    for (what, call, expect) in rows {
        out.push(case(what, call, expect));
    }
}
