//! ListContainers and ListPodSandbox filters: id prefix, state, pod, labels, and their
//! combinations; RemovePodSandbox of a READY pod.

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, map, NEEDS};
use crate::support::trial;
use crate::support::Scenario;

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "cri::pods::list_filters_for_pods_and_containers",
        NEEDS,
        filters,
    )]
}

fn filters() -> Result<()> {
    Scenario::new().run(async |s| {
        let d = &s.daemon;
        let busybox = s.image("busybox");
        let mut rt = s.rt.clone();
        let mut cfg_a = cri::pod_config(d, "filter-a");
        cfg_a.labels = map(&[("app", "a"), ("team", "x")]);
        let mut cfg_b = cri::pod_config(d, "filter-b");
        cfg_b.labels = map(&[("app", "b"), ("team", "x")]);
        let pa = cri::run_pod(&mut rt, cfg_a).await?;
        let pb_ = cri::run_pod(&mut rt, cfg_b).await?;

        let mut web = cri::sh_config(&pa, "web", &busybox, "exec sleep 1000");
        web.labels = map(&[("role", "web"), ("tier", "front")]);
        let c1 = cri::create_start(&mut rt, &pa, &web).await?;
        let mut db = cri::sh_config(&pa, "db", &busybox, "exec sleep 1000");
        db.labels = map(&[("role", "db")]);
        let c2 = cri::create(&mut rt, &pa, &db).await?;
        let mut job = cri::sh_config(&pb_, "job", &busybox, "true");
        job.labels = map(&[("role", "web")]);
        let c3 = cri::create_start(&mut rt, &pb_, &job).await?;
        cri::wait_exited(&mut rt, &c3, 10).await?;

        // Containers.
        let ids = |v: Vec<pb::Container>| {
            let mut ids: Vec<String> = v.into_iter().map(|c| c.id).collect();
            ids.sort();
            ids
        };
        let sorted = |v: &[&String]| {
            let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
            v.sort();
            v
        };
        let all = cri::list_containers(&mut rt, None).await?;
        ensure!(all.len() == 3, "all: {all:?}");
        let item = all.iter().find(|c| c.id == c1).context("web not listed")?;
        ensure!(
            item.pod_sandbox_id == pa.id
                && item.metadata.as_ref().map(|m| m.name.as_str()) == Some("web")
                && item.labels == web.labels
                && item.state == pb::ContainerState::ContainerRunning as i32
                && item.created_at > 0
                && !item.image_ref.is_empty(),
            "listed: {item:?}"
        );
        let cf = |f: pb::ContainerFilter| Some(f);
        let state = |s: pb::ContainerState| Some(pb::ContainerStateValue { state: s as i32 });
        let cases: Vec<(&str, pb::ContainerFilter, Vec<String>)> = vec![
            (
                "id prefix",
                pb::ContainerFilter {
                    id: c1[..12].to_string(),
                    ..Default::default()
                },
                sorted(&[&c1]),
            ),
            (
                "full id",
                pb::ContainerFilter {
                    id: c2.clone(),
                    ..Default::default()
                },
                sorted(&[&c2]),
            ),
            (
                "unknown id",
                pb::ContainerFilter {
                    id: "ffffffffffffffff".into(),
                    ..Default::default()
                },
                vec![],
            ),
            (
                "CREATED",
                pb::ContainerFilter {
                    state: state(pb::ContainerState::ContainerCreated),
                    ..Default::default()
                },
                sorted(&[&c2]),
            ),
            (
                "RUNNING",
                pb::ContainerFilter {
                    state: state(pb::ContainerState::ContainerRunning),
                    ..Default::default()
                },
                sorted(&[&c1]),
            ),
            (
                "EXITED",
                pb::ContainerFilter {
                    state: state(pb::ContainerState::ContainerExited),
                    ..Default::default()
                },
                sorted(&[&c3]),
            ),
            (
                "pod a",
                pb::ContainerFilter {
                    pod_sandbox_id: pa.id.clone(),
                    ..Default::default()
                },
                sorted(&[&c1, &c2]),
            ),
            (
                "pod b",
                pb::ContainerFilter {
                    pod_sandbox_id: pb_.id.clone(),
                    ..Default::default()
                },
                sorted(&[&c3]),
            ),
            (
                "role=web",
                pb::ContainerFilter {
                    label_selector: map(&[("role", "web")]),
                    ..Default::default()
                },
                sorted(&[&c1, &c3]),
            ),
            (
                "role=web,tier=front",
                pb::ContainerFilter {
                    label_selector: map(&[("role", "web"), ("tier", "front")]),
                    ..Default::default()
                },
                sorted(&[&c1]),
            ),
            (
                "pod a + role=web",
                pb::ContainerFilter {
                    pod_sandbox_id: pa.id.clone(),
                    label_selector: map(&[("role", "web")]),
                    ..Default::default()
                },
                sorted(&[&c1]),
            ),
            (
                "pod b + RUNNING",
                pb::ContainerFilter {
                    pod_sandbox_id: pb_.id.clone(),
                    state: state(pb::ContainerState::ContainerRunning),
                    ..Default::default()
                },
                vec![],
            ),
            (
                "role=nope",
                pb::ContainerFilter {
                    label_selector: map(&[("role", "nope")]),
                    ..Default::default()
                },
                vec![],
            ),
        ];
        for (what, f, want) in cases {
            let got = ids(cri::list_containers(&mut rt, cf(f)).await?);
            ensure!(
                got == want,
                "ListContainers {what}: got {got:?}, want {want:?}"
            );
        }

        // Pods: B is stopped for the state filter.
        rt.stop_pod_sandbox(pb::StopPodSandboxRequest {
            pod_sandbox_id: pb_.id.clone(),
        })
        .await?;
        let pids = |v: Vec<pb::PodSandbox>| {
            let mut ids: Vec<String> = v.into_iter().map(|p| p.id).collect();
            ids.sort();
            ids
        };
        let pstate = |s: pb::PodSandboxState| Some(pb::PodSandboxStateValue { state: s as i32 });
        let cases: Vec<(&str, Option<pb::PodSandboxFilter>, Vec<String>)> = vec![
            ("none", None, sorted(&[&pa.id, &pb_.id])),
            (
                "id prefix",
                Some(pb::PodSandboxFilter {
                    id: pa.id[..12].to_string(),
                    ..Default::default()
                }),
                sorted(&[&pa.id]),
            ),
            (
                "unknown id",
                Some(pb::PodSandboxFilter {
                    id: "ffffffffffffffff".into(),
                    ..Default::default()
                }),
                vec![],
            ),
            (
                "READY",
                Some(pb::PodSandboxFilter {
                    state: pstate(pb::PodSandboxState::SandboxReady),
                    ..Default::default()
                }),
                sorted(&[&pa.id]),
            ),
            (
                "NOTREADY",
                Some(pb::PodSandboxFilter {
                    state: pstate(pb::PodSandboxState::SandboxNotready),
                    ..Default::default()
                }),
                sorted(&[&pb_.id]),
            ),
            (
                "team=x",
                Some(pb::PodSandboxFilter {
                    label_selector: map(&[("team", "x")]),
                    ..Default::default()
                }),
                sorted(&[&pa.id, &pb_.id]),
            ),
            (
                "team=x,app=b",
                Some(pb::PodSandboxFilter {
                    label_selector: map(&[("team", "x"), ("app", "b")]),
                    ..Default::default()
                }),
                sorted(&[&pb_.id]),
            ),
            (
                "app=c",
                Some(pb::PodSandboxFilter {
                    label_selector: map(&[("app", "c")]),
                    ..Default::default()
                }),
                vec![],
            ),
            (
                "app=a + NOTREADY",
                Some(pb::PodSandboxFilter {
                    label_selector: map(&[("app", "a")]),
                    state: pstate(pb::PodSandboxState::SandboxNotready),
                    ..Default::default()
                }),
                vec![],
            ),
        ];
        for (what, f, want) in cases {
            let got = pids(cri::list_pods(&mut rt, f).await?);
            ensure!(
                got == want,
                "ListPodSandbox {what}: got {got:?}, want {want:?}"
            );
        }

        // RemovePodSandbox of a READY pod with a running and a created container.
        rt.remove_pod_sandbox(pb::RemovePodSandboxRequest {
            pod_sandbox_id: pa.id.clone(),
        })
        .await
        .context("RemovePodSandbox of a READY pod")?;
        rt.remove_pod_sandbox(pb::RemovePodSandboxRequest {
            pod_sandbox_id: pb_.id.clone(),
        })
        .await
        .context("RemovePodSandbox")?;
        let left = cri::list_containers(&mut rt, None).await?;
        ensure!(left.is_empty(), "containers left: {left:?}");
        ensure!(cri::list_pods(&mut rt, None).await?.is_empty());
        Ok(())
    })
}
