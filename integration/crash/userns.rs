//! kill -9 of the daemon at the steps a pod with its own user namespace adds: right after
//! pinns (the user namespace pinned with the pod's others), with a container's ID-mapped layer
//! clones staged, and in the pod's teardown. After the restart the pod is usable or removable,
//! and once it is removed no user namespace pin, holder process, staged clone or other mount is
//! left (support::leaks).

use anyhow::Result;

use crate::support::crash::{self as steps, call, Rpc, TRAP3};
use crate::support::cri::userns_pod;
use crate::support::cri::{self, Pod};
use crate::support::{block_on, trial, Daemon, Need};

const NEEDS: &[Need] = &[
    Need::Root,
    Need::Runc,
    Need::Images,
    Need::Cni,
    Need::UserNamespaces,
];

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "crash::userns::a_user_namespace_pod_killed_at_its_steps_leaves_nothing",
        NEEDS,
        at_its_steps,
    )]
}

/// The boundaries around what a user namespace adds (the others are in crash::steps).
const POINTS: &[&str] = &[
    "sandbox.run.namespaces=kill",
    "sandbox.run.ready=kill",
    "container.rootfs.staged=kill",
    "container.create.rootfs=kill",
    "sandbox.stop.torn-down=kill",
    "sandbox.remove.dir=kill",
];

fn at_its_steps() -> Result<()> {
    steps::suite(steps::Net::Embedded, POINTS, |d, spec, image, seen| {
        let config = userns_pod(d, "crash-userns");
        if spec.starts_with("sandbox.run.") {
            return steps::run_pod_killed_at(d, spec, image, seen, &config);
        }
        let pod = cri::with_log(
            d,
            block_on(async {
                let mut rt = cri::client(d).await?;
                cri::run_pod(&mut rt, config.clone()).await
            }),
        )?;
        seen.push(pod.id.clone());
        if spec.starts_with("container.") {
            create_killed_at(d, spec, image, &pod)
        } else {
            let main = running(d, image, &pod)?;
            d.crash_at(spec, |d| {
                if spec.starts_with("sandbox.stop.") {
                    call(d, Rpc::StopPod(&pod.id))
                } else {
                    call(d, Rpc::RemovePod(&pod.id))
                }
            })?;
            // Killed by the StopPodSandbox (137), or removed with its pod.
            cri::with_log(
                d,
                block_on(async {
                    let mut rt = cri::client(d).await?;
                    if cri::status(&mut rt, &main).await.is_ok() {
                        steps::check_created(&mut rt, &pod.id).await?;
                        cri::check_exit(
                            &cri::wait_exited(&mut rt, &main, 20).await?,
                            137,
                            "Error",
                        )?;
                    }
                    Ok(())
                }),
            )
        }
    })
}

/// CreateContainer in `pod` killed at `spec`: what was made of the container is removable,
/// and the same request then runs to its exit code (the ID-mapped rootfs works).
fn create_killed_at(d: &mut Daemon, spec: &str, image: &str, pod: &Pod) -> Result<()> {
    let c = cri::sh_config(pod, "main", image, "exit 6");
    d.crash_at(spec, |d| call(d, Rpc::Create(pod, &c)))?;
    cri::with_log(
        d,
        block_on(async {
            let mut rt = cri::client(d).await?;
            for left in cri::list_containers(&mut rt, None).await? {
                cri::remove(&mut rt, &left.id).await?;
            }
            let id = cri::create_start(&mut rt, pod, &c).await?;
            cri::check_exit(&cri::wait_exited(&mut rt, &id, 20).await?, 6, "Error")
        }),
    )
}

/// The id of a new container of `pod` running [`TRAP3`].
fn running(d: &Daemon, image: &str, pod: &Pod) -> Result<String> {
    cri::with_log(
        d,
        block_on(async {
            let mut rt = cri::client(d).await?;
            let c = cri::sh_config(pod, "main", image, TRAP3);
            let id = cri::create_start(&mut rt, pod, &c).await?;
            cri::wait_log(&pod.log_of(&c), 10, |l| l.iter().any(|x| x == "started")).await?;
            Ok(id)
        }),
    )
}
