//! `bosun pod get`: kubectl's pod table (READY, STATUS, RESTARTS, AGE), JSON/YAML output and watching.

use std::collections::HashMap;
use std::io::Write;

use anyhow::Context;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

use super::{now_ns, pod_of, GetArgs, Output};
use crate::proto::bosun::v1 as api;
use api::pods_client::PodsClient;

/// kubectl's short duration: 5s, 3m2s, 10m, 5h3m, 2d4h, 30d, 2y40d.
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    let s = secs.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86400);
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        match s % 60 {
            0 => format!("{m}m"),
            r => format!("{m}m{r}s"),
        }
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        match m % 60 {
            0 => format!("{h}h"),
            r => format!("{h}h{r}m"),
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        match h % 24 {
            0 => format!("{d}d"),
            r => format!("{d}d{r}h"),
        }
    } else if h < 24 * 365 * 2 {
        format!("{d}d")
    } else {
        let y = d / 365;
        match d % 365 {
            0 => format!("{y}y"),
            r if y < 8 => format!("{y}y{r}d"),
            _ => format!("{y}y"),
        }
    }
}

fn ts_ns(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> i64 {
    t.0.as_nanosecond() as i64
}

/// One table row's columns, computed as kubectl's pod printer does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub name: String,
    pub namespace: String,
    pub ready: String,
    pub status: String,
    pub restarts: String,
    pub age: String,
    pub ip: String,
    pub node: String,
}

fn terminated_reason(
    t: &k8s_openapi::api::core::v1::ContainerStateTerminated,
    prefix: &str,
) -> String {
    match t.reason.as_deref().filter(|r| !r.is_empty()) {
        Some(r) => format!("{prefix}{r}"),
        None if t.signal.unwrap_or(0) != 0 => format!("{prefix}Signal:{}", t.signal.unwrap_or(0)),
        None => format!("{prefix}ExitCode:{}", t.exit_code),
    }
}

fn last_restart_ns(s: &ContainerStatus) -> Option<i64> {
    s.last_state
        .as_ref()
        .and_then(|l| l.terminated.as_ref())
        .and_then(|t| t.finished_at.as_ref())
        .map(ts_ns)
}

/// The kubectl row of `pod` at `now` (ns).
pub fn row(pod: &Pod, now: i64) -> Row {
    let status = pod.status.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let mut reason = status.phase.clone().unwrap_or_default();
    if let Some(r) = status.reason.as_ref().filter(|r| !r.is_empty()) {
        reason = r.clone();
    }
    let sidecars: std::collections::HashSet<&str> = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"))
        .map(|c| c.name.as_str())
        .collect();
    let total = spec.containers.len() + sidecars.len();
    let mut ready = 0;
    let mut restarts = 0;
    let mut last_restart: Option<i64> = None;
    let mut bump = |s: &ContainerStatus, restarts: &mut i32| {
        *restarts += s.restart_count;
        if let Some(t) = last_restart_ns(s) {
            last_restart = Some(last_restart.map_or(t, |l: i64| l.max(t)));
        }
    };
    let inits = status.init_container_statuses.clone().unwrap_or_default();
    let n_init = spec.init_containers.as_ref().map_or(0, Vec::len);
    let mut initializing = false;
    for (i, s) in inits.iter().enumerate() {
        bump(s, &mut restarts);
        let state = s.state.clone().unwrap_or_default();
        if sidecars.contains(s.name.as_str()) {
            if s.started == Some(true) {
                if s.ready {
                    ready += 1;
                }
                continue;
            }
        } else if state.terminated.as_ref().is_some_and(|t| t.exit_code == 0) {
            continue;
        }
        reason = if let Some(t) = &state.terminated {
            terminated_reason(t, "Init:")
        } else if let Some(w) = state
            .waiting
            .as_ref()
            .and_then(|w| w.reason.as_deref())
            .filter(|r| !r.is_empty() && *r != "PodInitializing")
        {
            format!("Init:{w}")
        } else {
            format!("Init:{i}/{n_init}")
        };
        initializing = true;
        break;
    }
    let pod_ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    if !initializing {
        let mut has_running = false;
        for s in status.container_statuses.iter().flatten().rev() {
            bump(s, &mut restarts);
            let state = s.state.clone().unwrap_or_default();
            if let Some(w) = state
                .waiting
                .as_ref()
                .and_then(|w| w.reason.clone())
                .filter(|r| !r.is_empty())
            {
                reason = w;
            } else if let Some(t) = &state.terminated {
                reason = terminated_reason(t, "");
            } else if state.running.is_some() {
                has_running = true;
                if s.ready {
                    ready += 1;
                }
            }
        }
        if reason == "Completed" && has_running {
            reason = if pod_ready { "Running" } else { "NotReady" }.to_string();
        }
    }
    if pod.metadata.deletion_timestamp.is_some() {
        reason = "Terminating".into();
    }
    let restarts = match last_restart {
        Some(t) if restarts > 0 => format!(
            "{restarts} ({} ago)",
            human_duration((now - t) / 1_000_000_000)
        ),
        _ => restarts.to_string(),
    };
    let age = pod
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or("<unknown>".into(), |t| {
            human_duration((now - ts_ns(t)) / 1_000_000_000)
        });
    Row {
        name: pod.metadata.name.clone().unwrap_or_default(),
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        ready: format!("{ready}/{total}"),
        status: reason,
        restarts,
        age,
        ip: status.pod_ip.clone().unwrap_or_else(|| "<none>".into()),
        node: spec.node_name.clone().unwrap_or_else(|| "<none>".into()),
    }
}

/// The rows as an aligned table (with a NAMESPACE column for several namespaces).
pub fn render(rows: &[Row], wide: bool, namespaces: bool, header: bool) -> String {
    align(&cells(rows, wide, namespaces, header))
}

/// The table's cells, the header first when asked.
fn cells(rows: &[Row], wide: bool, namespaces: bool, header: bool) -> Vec<Vec<String>> {
    let mut cells: Vec<Vec<String>> = Vec::new();
    if header {
        let mut h: Vec<&str> = Vec::new();
        if namespaces {
            h.push("NAMESPACE");
        }
        h.extend(["NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
        if wide {
            h.extend(["IP", "NODE"]);
        }
        cells.push(h.into_iter().map(String::from).collect());
    }
    for r in rows {
        let mut c = Vec::new();
        if namespaces {
            c.push(r.namespace.clone());
        }
        c.extend([
            r.name.clone(),
            r.ready.clone(),
            r.status.clone(),
            r.restarts.clone(),
            r.age.clone(),
        ]);
        if wide {
            c.extend([r.ip.clone(), r.node.clone()]);
        }
        cells.push(c);
    }
    cells
}

/// Columns padded to their widest cell plus three spaces, as kubectl's tabwriter.
pub fn align(cells: &[Vec<String>]) -> String {
    align_to(cells, &mut Vec::new())
}

/// [`align`] with columns at least `widths` wide, which grow to fit: the rows `get -w` prints
/// one at a time stay under the header and the first table.
fn align_to(cells: &[Vec<String>], widths: &mut Vec<usize>) -> String {
    for r in cells {
        if widths.len() < r.len() {
            widths.resize(r.len(), 0);
        }
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in cells {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(c);
            } else {
                line.push_str(&format!("{c:<w$}   ", w = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

pub(super) fn selector(s: Option<&str>) -> anyhow::Result<HashMap<String, String>> {
    let mut m = HashMap::new();
    for part in s.unwrap_or_default().split(',').filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .with_context(|| format!("selector {part:?}: only k=v is supported"))?;
        m.insert(k.trim_end_matches('=').to_string(), v.to_string());
    }
    Ok(m)
}

/// `bosun pod get`.
pub async fn get(c: &mut PodsClient<tonic::transport::Channel>, a: GetArgs) -> anyhow::Result<()> {
    let views = match &a.name {
        Some(n) => vec![super::get_view(c, &a.ns.namespace, n).await?],
        None => {
            c.list(api::ListPodsRequest {
                namespace: if a.all_namespaces {
                    String::new()
                } else {
                    a.ns.namespace.clone()
                },
                labels: selector(a.selector.as_deref())?,
            })
            .await?
            .into_inner()
            .pods
        }
    };
    let pods: Vec<Pod> = views.iter().map(pod_of).collect::<anyhow::Result<_>>()?;
    let mut out = std::io::stdout();
    // The table's column widths, which the watched rows keep.
    let mut widths = Vec::new();
    match a.output {
        Some(Output::Json) | Some(Output::Yaml) => {
            let value = if a.name.is_some() && pods.len() == 1 {
                serde_json::to_value(&pods[0])?
            } else {
                serde_json::json!({"apiVersion": "v1", "kind": "List", "items": pods, "metadata": {}})
            };
            if a.output == Some(Output::Json) {
                writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?;
            } else {
                write!(out, "{}", serde_yaml_ng::to_string(&value)?)?;
            }
        }
        Some(Output::Name) => {
            for p in &pods {
                writeln!(out, "pod/{}", p.metadata.name.clone().unwrap_or_default())?;
            }
        }
        o => {
            let rows: Vec<Row> = pods.iter().map(|p| row(p, now_ns())).collect();
            let table = cells(&rows, o == Some(Output::Wide), a.all_namespaces, true);
            if rows.is_empty() && !a.watch {
                let ns = if a.all_namespaces {
                    String::new()
                } else {
                    format!(" in {} namespace", a.ns.namespace)
                };
                eprintln!("No resources found{ns}.");
            } else {
                out.write_all(align_to(&table, &mut widths).as_bytes())?;
            }
        }
    }
    out.flush()?;
    if a.watch {
        watch(c, &a, widths).await?;
    }
    Ok(())
}

async fn watch(
    c: &mut PodsClient<tonic::transport::Channel>,
    a: &GetArgs,
    mut widths: Vec<usize>,
) -> anyhow::Result<()> {
    let mut stream = c.watch(api::WatchPodsRequest {}).await?.into_inner();
    let want = selector(a.selector.as_deref())?;
    while let Some(ev) = stream.message().await? {
        let Some(v) = ev.pod else { continue };
        let pod = pod_of(&v)?;
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        if !a.all_namespaces && ns != a.ns.namespace {
            continue;
        }
        if a.name.as_ref().is_some_and(|n| *n != name) {
            continue;
        }
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        if want.iter().any(|(k, v)| labels.get(k) != Some(v)) {
            continue;
        }
        let r = row(&pod, now_ns());
        let text = match a.output {
            Some(Output::Json) => format!("{}\n", serde_json::to_string(&pod)?),
            Some(Output::Yaml) => format!("---\n{}", serde_yaml_ng::to_string(&pod)?),
            Some(Output::Name) => format!("pod/{name}\n"),
            o => align_to(
                &cells(&[r], o == Some(Output::Wide), a.all_namespaces, false),
                &mut widths,
            ),
        };
        let mut out = std::io::stdout();
        out.write_all(text.as_bytes())?;
        out.flush()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_like_kubectl() {
        for (s, want) in [
            (0, "0s"),
            (5, "5s"),
            (119, "119s"),
            (120, "2m"),
            (182, "3m2s"),
            (600, "10m"),
            (179 * 60, "179m"),
            (3 * 3600 + 5 * 60, "3h5m"),
            (8 * 3600, "8h"),
            (47 * 3600, "47h"),
            (2 * 86400 + 4 * 3600, "2d4h"),
            (30 * 86400, "30d"),
            (-5, "<invalid>"),
        ] {
            assert_eq!(human_duration(s), want, "{s}");
        }
    }

    fn pod(yaml: &str) -> Pod {
        serde_yaml_ng::from_str(yaml).expect("pod yaml")
    }

    const NOW: i64 = 1_700_000_100_000_000_000;

    #[test]
    fn status_column_follows_kubectl() {
        let running = pod(
            "metadata: {name: web, creationTimestamp: '2023-11-14T22:13:20Z'}
spec: {containers: [{name: a}]}
status: {phase: Running, conditions: [{type: Ready, status: 'True'}],
  containerStatuses: [{name: a, image: i, imageID: '', ready: true, restartCount: 2,
    state: {running: {startedAt: '2023-11-14T22:14:00Z'}},
    lastState: {terminated: {exitCode: 1, finishedAt: '2023-11-14T22:14:50Z'}}}]}",
        );
        let r = row(&running, NOW);
        assert_eq!(r.ready, "1/1");
        assert_eq!(r.status, "Running");
        assert_eq!(r.restarts, "2 (10s ago)");
        assert_eq!(r.age, "100s");

        let crash = pod("metadata: {name: c}
spec: {containers: [{name: a}]}
status: {phase: Running, containerStatuses: [{name: a, image: i, imageID: '', ready: false, restartCount: 3,
  state: {waiting: {reason: CrashLoopBackOff}}}]}");
        assert_eq!(row(&crash, NOW).status, "CrashLoopBackOff");

        let init = pod("metadata: {name: i}
spec: {initContainers: [{name: one}, {name: two}], containers: [{name: a}]}
status: {phase: Pending,
  initContainerStatuses: [
    {name: one, image: i, imageID: '', ready: false, restartCount: 0, state: {terminated: {exitCode: 0, reason: Completed}}},
    {name: two, image: i, imageID: '', ready: false, restartCount: 0, state: {running: {}}}],
  containerStatuses: [{name: a, image: i, imageID: '', ready: false, restartCount: 0, state: {waiting: {reason: PodInitializing}}}]}");
        assert_eq!(row(&init, NOW).status, "Init:1/2");

        let init_fail = pod("metadata: {name: i}
spec: {initContainers: [{name: one}], containers: [{name: a}]}
status: {phase: Pending, initContainerStatuses: [
    {name: one, image: i, imageID: '', ready: false, restartCount: 1, state: {waiting: {reason: CrashLoopBackOff}}}]}");
        assert_eq!(row(&init_fail, NOW).status, "Init:CrashLoopBackOff");

        let done = pod("metadata: {name: d}
spec: {containers: [{name: a}]}
status: {phase: Succeeded, containerStatuses: [{name: a, image: i, imageID: '', ready: false, restartCount: 0,
  state: {terminated: {exitCode: 0, reason: Completed}}}]}");
        assert_eq!(row(&done, NOW).status, "Completed");
        let err = pod("metadata: {name: d}
spec: {containers: [{name: a}]}
status: {phase: Failed, containerStatuses: [{name: a, image: i, imageID: '', ready: false, restartCount: 0,
  state: {terminated: {exitCode: 3}}}]}");
        assert_eq!(row(&err, NOW).status, "ExitCode:3");

        let sidecar = pod("metadata: {name: s, deletionTimestamp: '2023-11-14T22:14:00Z'}
spec: {initContainers: [{name: side, restartPolicy: Always}], containers: [{name: a}]}
status: {phase: Running, initContainerStatuses: [
    {name: side, image: i, imageID: '', ready: true, started: true, restartCount: 0, state: {running: {}}}],
  containerStatuses: [{name: a, image: i, imageID: '', ready: true, restartCount: 0, state: {running: {}}}]}");
        let r = row(&sidecar, NOW);
        assert_eq!(r.ready, "2/2", "sidecars count as containers");
        assert_eq!(r.status, "Terminating");
    }

    #[test]
    fn table_is_aligned() {
        let r = Row {
            name: "web".into(),
            namespace: "default".into(),
            ready: "1/1".into(),
            status: "Running".into(),
            restarts: "0".into(),
            age: "5s".into(),
            ip: "10.0.0.2".into(),
            node: "n".into(),
        };
        let t = render(std::slice::from_ref(&r), false, false, true);
        assert_eq!(
            t,
            "NAME   READY   STATUS    RESTARTS   AGE\nweb    1/1     Running   0          5s\n"
        );

        // Watched rows keep the table's widths, and widen it only when they must.
        let long = Row {
            name: "a-much-longer-name".into(),
            status: "ContainerCreating".into(),
            ..r.clone()
        };
        let mut widths = Vec::new();
        align_to(&cells(&[long], false, false, true), &mut widths);
        let watched = align_to(&cells(&[r], false, false, false), &mut widths);
        assert_eq!(
            watched,
            "web                  1/1     Running             0          5s\n"
        );
    }
}
