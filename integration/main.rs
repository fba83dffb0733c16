//! Integration tests: the real daemon over its socket, a real registry and real images (root only).

mod cri_containers;
mod cri_exec;
mod cri_images;
mod cri_pods;
mod cri_recovery;
mod cri_stats;
mod cri_stop;
mod daemon;
mod images;
mod images_hostile;
mod monitor;
mod oci_spec;
mod runc;
mod sandbox;
mod support;

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let mut trials = Vec::new();
    trials.extend(cri_pods::trials());
    trials.extend(cri_containers::trials());
    trials.extend(cri_stop::trials());
    trials.extend(cri_exec::trials());
    trials.extend(cri_images::trials());
    trials.extend(cri_recovery::trials());
    trials.extend(cri_stats::trials());
    trials.extend(daemon::trials());
    trials.extend(images::trials());
    trials.extend(images_hostile::trials());
    trials.extend(monitor::trials());
    trials.extend(oci_spec::trials());
    trials.extend(runc::trials());
    trials.extend(sandbox::trials());
    libtest_mimic::run(&args, trials).exit();
}
