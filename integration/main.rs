//! Integration tests: the real daemon over its socket, a real registry and real images (root only).

/// `pub fn trials()`: every trial of the listed test modules, in this order. Each module is
/// declared with a plain `mod` line too (rustfmt formats only the files of modules it sees, and
/// it does not look into macros); the build fails on a module declared but not listed (its
/// `trials` is never used) and on one listed but not declared.
macro_rules! trials {
    ($($m:ident),* $(,)?) => {
        /// Every trial of this directory's test modules.
        pub fn trials() -> Vec<libtest_mimic::Trial> {
            let mut all = Vec::new();
            $(all.extend($m::trials());)*
            all
        }
    };
}

mod certs_d;
mod cgroups;
mod cli;
mod crash;
mod cri;
mod ctr;
mod daemon;
mod disk;
mod faults;
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

trials! {
    cgroups,
    certs_d,
    cli,
    cri,
    sessions,
    crash,
    ctr,
    daemon,
    disk,
    faults,
    images,
    images_hostile,
    kubectl,
    monitor,
    oci_spec,
    pod,
    runc,
    sandbox,
    systemd,
}

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
    libtest_mimic::run(&args, trials()).exit();
}
