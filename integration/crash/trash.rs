//! kill -9 of the daemon while it deletes a removed container's files in the background: the
//! container stays removed, and the next start unmounts and deletes what the trash holds.

use anyhow::{ensure, Context, Result};

use crate::support::crash::{daemon, pod_with_container, remove_all_and_check, Net, TRAP3};
use crate::support::cri;
use crate::support::{block_on, trial, Need};

/// Root, runc and the test images (the embedded network needs no plugins).
const NEEDS: &[Need] = &[Need::Root, Need::Runc, Need::Images];

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "crash::a_removal_killed_while_deleting_is_finished_at_the_next_start",
        NEEDS,
        killed_while_deleting,
    )]
}

fn killed_while_deleting() -> Result<()> {
    use std::os::unix::process::ExitStatusExt;
    let mut d = daemon(Net::Embedded)?;
    let image = cri::import(&d, "busybox")?;
    let (pod, id) = pod_with_container(&d, &image, TRAP3, true)?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            cri::stop(&mut rt, &id, 0).await.map(drop)
        }),
    )?;
    // The first trash entry deleted is the container's bundle, its rootfs overlay still
    // mounted: the daemon dies before the unmount.
    d.set_failpoints(Some("trash.delete.begin=kill"));
    d.restart()?;
    let removed = block_on(async {
        let mut rt = cri::client(&d).await?;
        cri::remove(&mut rt, &id).await
    });
    let status = d.wait_exit(30);
    d.set_failpoints(None);
    ensure!(
        status.is_some_and(|s| s.signal() == Some(libc::SIGKILL)),
        "the failpoint did not kill the daemon (exit {status:?}; RemoveContainer: {removed:?})"
    );
    let trash = d.state().join("trash");
    let mounted = cri::mounts_under(&trash);
    ensure!(
        !mounted.is_empty(),
        "expected the rootfs overlay still mounted in {}; mounts {mounted:?}",
        trash.display()
    );
    d.restart().context("restart after the kill")?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let listed = cri::list_containers(&mut rt, None)
                .await?
                .iter()
                .any(|c| c.id == id);
            // The daemon may die before or after the record's rename: a removal that was
            // answered must hold; one that was not may leave the container, removable again.
            ensure!(
                !(listed && removed.is_ok()),
                "RemoveContainer succeeded, yet the container is back"
            );
            if listed {
                cri::remove(&mut rt, &id).await?;
            }
            Ok(())
        }),
    )?;
    // Also waits for the trash to empty: no mount, no entry may stay.
    remove_all_and_check(&d, &mut vec![pod.id])
}
