//! A read-only rootfs and bind mounts (read-only and read-write) in a container; without
//! readonly_rootfs, writes stay in the container.

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, NEEDS};
use crate::support::trial;
use crate::support::Scenario;

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "cri::containers::readonly_rootfs_and_bind_mounts",
        NEEDS,
        mounts,
    )]
}

fn mounts() -> Result<()> {
    Scenario::new().run(async |s| {
        let d = &s.daemon;
        let busybox = s.image("busybox");
        let ro_src = d.dir().join("ro-src");
        let rw_src = d.dir().join("rw-src");
        let missing = d.dir().join("missing-src/sub");
        std::fs::create_dir_all(&ro_src)?;
        std::fs::create_dir_all(&rw_src)?;
        std::fs::write(ro_src.join("hello"), "hello from the host\n")?;
        let mut rt = s.rt.clone();
        let pod = cri::run_pod(&mut rt, cri::pod_config(d, "mounts")).await?;
        let script = "touch /rootfs-write 2>/dev/null && echo rootfs=rw || echo rootfs=ro; \
        echo data=$(cat /data/hello); \
        touch /data/new 2>/dev/null && echo data-write=yes || echo data-write=no; \
        echo written > /rw/out && echo rw=ok; \
        test -d /made && echo made=ok";
        let mut c = cri::sh_config(&pod, "ro", &busybox, script);
        cri::security(&mut c).readonly_rootfs = true;
        let mount = |container: &str, host: &std::path::Path, readonly: bool| pb::Mount {
            container_path: container.into(),
            host_path: host.display().to_string(),
            readonly,
            ..Default::default()
        };
        c.mounts = vec![
            mount("/data", &ro_src, true),
            mount("/rw", &rw_src, false),
            mount("/made", &missing, false),
        ];
        let id = cri::create_start(&mut rt, &pod, &c).await?;
        let s = cri::wait_exited(&mut rt, &id, 10).await?;
        let log = cri::read_log(&pod.log_of(&c))?;
        let out = cri::lines_of(&log, "stdout");
        cri::check_exit(&s, 0, "Completed")
            .with_context(|| format!("{out:?} {:?}", cri::lines_of(&log, "stderr")))?;
        ensure!(
            out == [
                "rootfs=ro",
                "data=hello from the host",
                "data-write=no",
                "rw=ok",
                "made=ok"
            ],
            "read-only rootfs and mounts: {out:?}"
        );
        ensure!(
            std::fs::read_to_string(rw_src.join("out"))? == "written\n",
            "the rw mount's write is not on the host"
        );
        ensure!(
            !ro_src.join("new").exists(),
            "wrote through a read-only mount"
        );
        ensure!(missing.is_dir(), "a missing host path must be created");
        for want in &c.mounts {
            ensure!(
                s.mounts
                    .iter()
                    .any(|m| m.container_path == want.container_path
                        && m.host_path == want.host_path
                        && m.readonly == want.readonly),
                "ContainerStatus.mounts lacks {want:?}: {:?}",
                s.mounts
            );
        }
        // Without readonly_rootfs the rootfs is writable, and writes stay in the container.
        let c = cri::sh_config(
            &pod,
            "rw",
            &busybox,
            "touch /rootfs-write && echo rootfs=rw",
        );
        let id = cri::create_start(&mut rt, &pod, &c).await?;
        let s = cri::wait_exited(&mut rt, &id, 10).await?;
        cri::check_exit(&s, 0, "Completed")?;
        let out = cri::lines_of(&cri::read_log(&pod.log_of(&c))?, "stdout");
        ensure!(out == ["rootfs=rw"], "{out:?}");
        let c = cri::sh_config(
            &pod,
            "fresh",
            &busybox,
            "test -e /rootfs-write && echo leaked || echo fresh",
        );
        let out = cri::run_to_completion(&mut rt, &pod, &c).await?;
        ensure!(
            out == ["fresh"],
            "one container's rootfs write seen by another: {out:?}"
        );
        cri::remove_pod(&mut rt, &pod.id).await?;
        Ok(())
    })
}
