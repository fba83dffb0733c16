//! The markdown table of results, with the machine and the notes under it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::Command;
use std::time::Duration;

use crate::daemons::{Kind, BOSUN};
use crate::measure::{median, percentile, proc_kb, Mem};
use crate::{QUERIES, STATUS_REF, TINY_IMAGES};

const MIB: f64 = 1024.0 * 1024.0;

/// How a metric's values are shown.
#[derive(Debug, Clone, Copy)]
pub enum Unit {
    Ms,
    Us,
    MiB,
    S,
}

impl Unit {
    /// The number alone.
    fn num(self, v: f64) -> String {
        match self {
            Unit::Ms if v < 10.0 => format!("{v:.2}"),
            Unit::Ms | Unit::MiB => format!("{v:.1}"),
            Unit::Us => format!("{v:.0}"),
            Unit::S => format!("{v:.2}"),
        }
    }

    fn suffix(self) -> &'static str {
        match self {
            Unit::Ms => "ms",
            Unit::Us => "µs",
            Unit::MiB => "MiB",
            Unit::S => "s",
        }
    }

    /// The median of `samples` with its unit, and their range when there are several.
    fn show(self, samples: &[f64]) -> String {
        let med = format!("{} {}", self.num(median(samples)), self.suffix());
        if samples.len() < 2 {
            return med;
        }
        let (lo, hi) = (percentile(samples, 0.0), percentile(samples, 1.0));
        format!("{med} [{}–{}]", self.num(lo), self.num(hi))
    }
}

/// One row: samples per runtime, shown as their median.
struct Metric {
    name: String,
    unit: Unit,
    samples: BTreeMap<Kind, Vec<f64>>,
}

/// The rows, in the order first recorded.
pub struct Report {
    rounds: usize,
    /// The 1-minute load average when the bench started.
    load_before: String,
    metrics: Vec<Metric>,
}

/// The goals for bosun's figures, by row name prefix: (prefix, limit, shown as).
const GOALS: [(&str, f64, &str); 3] = [
    ("idle, 2 s after start: RSS", 15.0, "≤ 15 MiB"),
    ("ListImages p50", 1000.0, "≤ 1 ms"),
    ("ImageStatus p50", 1000.0, "≤ 1 ms"),
];

impl Report {
    pub fn new(rounds: usize) -> Report {
        Report {
            rounds,
            load_before: load_average(),
            metrics: Vec::new(),
        }
    }

    /// RSS and PSS (and peak RSS with `peak`) rows for memory taken `when`.
    pub fn memory(&mut self, when: &str, kind: Kind, m: Mem, peak: bool) {
        self.record(
            &format!("{when}: RSS (VmRSS)"),
            Unit::MiB,
            kind,
            m.rss / MIB,
        );
        self.record(
            &format!("{when}: PSS (smaps_rollup)"),
            Unit::MiB,
            kind,
            m.pss / MIB,
        );
        if peak {
            self.record(
                &format!("{when}: peak RSS (VmHWM)"),
                Unit::MiB,
                kind,
                m.hwm / MIB,
            );
        }
    }

    pub fn record(&mut self, name: &str, unit: Unit, kind: Kind, v: f64) {
        let i = match self.metrics.iter().position(|m| m.name == name) {
            Some(i) => i,
            None => {
                let m = Metric {
                    name: name.to_string(),
                    unit,
                    samples: BTreeMap::new(),
                };
                self.metrics.push(m);
                self.metrics.len() - 1
            }
        };
        self.metrics[i].samples.entry(kind).or_default().push(v);
    }

    pub fn render(&self, took: Duration) -> anyhow::Result<String> {
        let mut s = String::new();
        writeln!(s, "## bosun vs containerd: images (issue \"Foundation\")\n")?;
        writeln!(s, "{}", machine())?;
        writeln!(
            s,
            "1-minute load average {} before, {} after: other work on the machine widens the \
             [min–max] ranges.\n",
            self.load_before,
            load_average()
        )?;
        writeln!(
            s,
            "| metric | bosun | goal (bosun) | containerd | ratio (containerd/bosun) |"
        )?;
        writeln!(s, "| --- | --- | --- | --- | --- |")?;
        for m in &self.metrics {
            let med = |k: Kind| m.samples.get(&k).map(|v| median(v));
            let (b, c) = (med(Kind::Bosun), med(Kind::Containerd));
            let show = |k: Kind| {
                m.samples
                    .get(&k)
                    .map_or_else(|| "—".into(), |v| m.unit.show(v))
            };
            let ratio = match (b, c) {
                (Some(b), Some(c)) if b > 0.0 => format!("{:.2}×", c / b),
                _ => "—".to_string(),
            };
            let goal = match (GOALS.iter().find(|g| m.name.starts_with(g.0)), b) {
                (Some((_, limit, text)), Some(b)) => {
                    format!("{text} {}", if b <= *limit { "✓" } else { "✗" })
                }
                _ => "—".to_string(),
            };
            writeln!(
                s,
                "| {} | {} | {goal} | {} | {ratio} |",
                m.name,
                show(Kind::Bosun),
                show(Kind::Containerd)
            )?;
        }
        writeln!(s, "\n{}", self.notes(took))?;
        Ok(s)
    }

    fn notes(&self, took: Duration) -> String {
        [
            format!(
                "- Figures are medians, [min–max] over rounds or samples. Pull and import rows: \
                 {} round(s); every pull and import runs in a fresh \
                 daemon on a new temp root (nothing cached), runtimes alternate going first; \
                 one discarded warm-up pull per image first.",
                self.rounds
            ),
            "- Pulls: CRI PullImage through the same tonic client, registry on 127.0.0.1 over \
             plain HTTP (containerd via a registry mirror entry)."
                .to_string(),
            "- Imports: containerd's figure is `ctr -n k8s.io images import` wall time in both \
             rows (ctr start included, archive streamed to containerd over gRPC); `Import RPC` \
             gives bosun the path and excludes process start, `CLI` is `bosun image import` \
             wall time (like for like)."
                .to_string(),
            format!(
                "- Idle memory: {} samples per runtime (first daemon of each round, and the \
                 daemon of the {}-image phase). Latency: {QUERIES} sequential calls after {} \
                 warm-up calls, ImageStatus of `{STATUS_REF}` by tag.",
                self.rounds + 1,
                TINY_IMAGES,
                QUERIES / 10
            ),
            "- containerd runs with its default plugins (aufs, btrfs, zfs and devmapper \
             snapshotters skip themselves here) and an empty CNI dir; ratios above 1 favour bosun."
                .to_string(),
            format!("- Bench wall time: {:.0} s.", took.as_secs_f64()),
        ]
        .join("\n")
    }
}

/// The first field of /proc/loadavg.
fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split(' ').next().unwrap_or("?").to_string()
}

/// nproc, kernel, CPU, memory and the two versions.
fn machine() -> String {
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("?")
        .trim()
        .to_string();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem = proc_kb(&meminfo, "MemTotal:").map_or(0.0, |b| b / MIB / 1024.0);
    let version = |bin: &str| {
        Command::new(bin)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    format!(
        "Machine: {nproc} CPUs ({cpu}), {mem:.1} GiB RAM, kernel {}. {}; {}.",
        kernel.trim(),
        version(BOSUN),
        version("containerd")
    )
}
