//! Integration tests: the real daemon over its socket, a real registry and real images (root only).

mod certs_d;
mod cgroups;
mod cli_errors;
mod crash_churn;
mod crash_cni;
mod crash_lock;
mod crash_net;
mod crash_steps;
mod crash_trash;
mod crash_userns;
mod cri_conform;
mod cri_containers;
mod cri_deadline;
mod cri_deferred;
mod cri_events;
mod cri_exec;
mod cri_features;
mod cri_images;
mod cri_network;
mod cri_pods;
mod cri_recovery;
mod cri_sessions;
mod cri_spare;
mod cri_stats;
mod cri_stop;
mod cri_streaming;
mod cri_userns;
mod ctr;
mod daemon;
mod daemon_idle;
mod disk_full;
mod disk_records;
mod faults_daemons;
mod faults_lists;
mod faults_undo;
mod hostile;
mod hostile_cases;
mod images;
mod images_flaky;
mod images_hostile;
mod kubectl;
mod monitor;
mod oci_spec;
mod pod_config;
mod pod_eviction;
mod pod_lifecycle;
mod pod_node;
mod pod_pressure;
mod pod_probes;
mod pod_termination;
mod runc;
mod sandbox;
mod support;
mod systemd;

fn main() {
    // In-process runtimes (support::inproc) run this binary as their monitor and pod helpers:
    // dispatched first, while the process is still single-threaded (the monitor forks).
    let mut argv = std::env::args_os().skip(1);
    let helper = argv.next();
    let rest: Vec<std::ffi::OsString> = argv.collect();
    match helper.as_deref().and_then(|a| a.to_str()) {
        Some("monitor") => std::process::exit(bosun::monitor::main(rest)),
        Some("pinns") => std::process::exit(bosun::sandbox::pinns::main(rest)),
        Some("pod-init") => std::process::exit(bosun::sandbox::init::main(rest)),
        _ => {}
    }
    let args = libtest_mimic::Arguments::from_args();
    let mut trials = Vec::new();
    trials.extend(cgroups::trials());
    trials.extend(certs_d::trials());
    trials.extend(cli_errors::trials());
    trials.extend(cri_pods::trials());
    trials.extend(cri_containers::trials());
    trials.extend(cri_deferred::trials());
    trials.extend(cri_spare::trials());
    trials.extend(cri_conform::trials());
    trials.extend(cri_deadline::trials());
    trials.extend(cri_stop::trials());
    trials.extend(cri_streaming::trials());
    trials.extend(cri_exec::trials());
    trials.extend(cri_events::trials());
    trials.extend(cri_sessions::trials());
    trials.extend(cri_images::trials());
    trials.extend(cri_network::trials());
    trials.extend(cri_recovery::trials());
    trials.extend(cri_stats::trials());
    trials.extend(cri_features::trials());
    trials.extend(cri_userns::trials());
    trials.extend(crash_steps::trials());
    trials.extend(crash_trash::trials());
    trials.extend(crash_cni::trials());
    trials.extend(crash_userns::trials());
    trials.extend(crash_churn::trials());
    trials.extend(crash_lock::trials());
    trials.extend(crash_net::trials());
    trials.extend(ctr::trials());
    trials.extend(daemon::trials());
    trials.extend(daemon_idle::trials());
    trials.extend(disk_full::trials());
    trials.extend(disk_records::trials());
    trials.extend(faults_undo::trials());
    trials.extend(faults_daemons::trials());
    trials.extend(faults_lists::trials());
    trials.extend(hostile::trials());
    trials.extend(images::trials());
    trials.extend(images_flaky::trials());
    trials.extend(images_hostile::trials());
    trials.extend(kubectl::trials());
    trials.extend(monitor::trials());
    trials.extend(oci_spec::trials());
    trials.extend(pod_config::trials());
    trials.extend(pod_lifecycle::trials());
    trials.extend(pod_node::trials());
    trials.extend(pod_eviction::trials());
    trials.extend(pod_pressure::trials());
    trials.extend(pod_probes::trials());
    trials.extend(pod_termination::trials());
    trials.extend(runc::trials());
    trials.extend(sandbox::trials());
    trials.extend(systemd::trials());
    libtest_mimic::run(&args, trials).exit();
}
