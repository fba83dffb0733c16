//! One fake-backed Runtime for the runtime's unit tests: a temporary root and state dir, a fake runc, monitor launcher and network.

use std::sync::Arc;

use super::service::Runtime;
use crate::config::Config;
use crate::image::service::Images;
use crate::network::FakeNetwork;
use crate::oci::{FakeLauncher, FakeRuntime, HostFacts};

/// A runtime over fakes, and the fakes to script or inspect.
pub(crate) struct Fixture {
    pub dir: tempfile::TempDir,
    pub rt: Arc<Runtime>,
    pub runc: Arc<FakeRuntime>,
    pub launcher: Arc<FakeLauncher>,
    pub net: Arc<FakeNetwork>,
}

/// A fresh runtime under a new temporary directory (`root/`, `state/`).
pub(crate) fn fixture() -> Fixture {
    fixture_with(|_| {})
}

/// [`fixture`] with `tweak` applied to its config.
pub(crate) fn fixture_with(tweak: impl FnOnce(&mut Config)) -> Fixture {
    fixture_on(tweak, HostFacts::default())
}

/// [`fixture_with`] on a host with `host`'s facts (CRIU found, say).
pub(crate) fn fixture_on(tweak: impl FnOnce(&mut Config), host: HostFacts) -> Fixture {
    let dir = tempfile::tempdir().expect("tmp");
    let mut config = Config {
        root: dir.path().join("root"),
        state: dir.path().join("state"),
        ..Config::default()
    };
    tweak(&mut config);
    let images = Images::open(&config).expect("images");
    let runc = Arc::new(FakeRuntime::new());
    let launcher = Arc::new(FakeLauncher::default());
    let net = Arc::new(FakeNetwork::default());
    let rt = Runtime::with_network(
        Arc::new(config),
        images,
        runc.clone(),
        launcher.clone(),
        host,
        net.clone(),
        crate::cgroups::warm::Warmer::default(),
    )
    .expect("runtime");
    Fixture {
        dir,
        rt,
        runc,
        launcher,
        net,
    }
}
