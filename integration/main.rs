//! Integration tests: the real daemon over its socket, a real registry and real images (root only).

mod cgroups;
mod crash;
mod cri;
mod daemon;
mod images;
mod images_hostile;
mod kubectl;
mod monitor;
mod oci_spec;
mod pod;
mod runc;
mod sandbox;
mod sessions;
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
    trials.extend(cri::trials());
    trials.extend(sessions::trials());
    trials.extend(crash::trials());
    trials.extend(daemon::trials());
    trials.extend(images::trials());
    trials.extend(images_hostile::trials());
    trials.extend(kubectl::trials());
    trials.extend(monitor::trials());
    trials.extend(oci_spec::trials());
    trials.extend(pod::trials());
    trials.extend(runc::trials());
    trials.extend(sandbox::trials());
    trials.extend(systemd::trials());
    libtest_mimic::run(&args, trials).exit();
}
