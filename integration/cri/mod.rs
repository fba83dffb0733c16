//! The CRI RuntimeService over the socket with real runc: `cri::` trials.

mod apparmor;
mod checkpoint;
mod checkpoint_crun;
mod checkpoint_image_script;
mod checkpoint_kubelet;
mod checkpoint_restore;
mod checkpoint_restore_lane;
pub mod conform;
mod containers;
mod deferred;
mod events;
mod exec;
mod features;
pub mod handlers;
mod handlers_bare;
mod handlers_crun;
mod hostile;
mod images;
mod network;
mod pods;
mod recovery;
mod spare;
mod stats;
mod stop;
mod streaming;
pub mod userns;

trials! {
    pods,
    containers,
    deferred,
    spare,
    conform,
    stop,
    streaming,
    exec,
    events,
    images,
    network,
    recovery,
    stats,
    features,
    handlers,
    handlers_crun,
    userns,
    hostile,
    apparmor,
    checkpoint,
    checkpoint_image_script,
    checkpoint_crun,
    checkpoint_kubelet,
    checkpoint_restore,
    checkpoint_restore_lane,
}
