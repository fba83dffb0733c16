//! The results table (metric | bosun | containerd | ratio), the notes under it and the summary.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::Command;

use crate::daemons::{Kind, BOSUN};
use crate::measure::proc_kb;

pub const MIB: f64 = 1024.0 * 1024.0;

/// How a metric's value is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Ms,
    Us,
    MiB,
    /// A plain count.
    N,
    /// A ratio, shown as `1.23×`.
    X,
}

impl Unit {
    fn show(self, v: f64) -> String {
        match self {
            Unit::Ms if v.abs() < 10.0 => format!("{v:.2} ms"),
            Unit::Ms => format!("{v:.1} ms"),
            Unit::Us => format!("{v:.0} µs"),
            Unit::MiB => format!("{v:.2} MiB"),
            Unit::N if v.fract() == 0.0 => format!("{v:.0}"),
            Unit::N => format!("{v:.1}"),
            Unit::X => format!("{v:.2}×"),
        }
    }
}

/// One row: a value per runtime.
struct Row {
    name: String,
    unit: Unit,
    values: BTreeMap<Kind, f64>,
}

impl Row {
    /// Whether a containerd/bosun ratio means something: not for counts, nor for the bare runc
    /// baseline (the same thing, measured next to each runtime).
    fn compared(&self) -> bool {
        self.unit != Unit::N && !self.name.starts_with(BARE_ROW)
    }
}

/// The name prefix of the bare runc baseline rows.
pub const BARE_ROW: &str = "bare runc run --detach";
/// The baseline row of runc running bosun's own config.json.
pub const SAME_BUNDLE_ROW: &str = "bare runc run --detach of bosun's own config.json";
/// Create+Start over the same-bundle baseline: the goal.
pub const SAME_BUNDLE_RATIO: &str = "Create+Start ÷ runc run of the same bundle (p50)";
/// Create+Start minus the same-bundle run that follows it, per sample: bosun's overhead.
pub const SAME_BUNDLE_ADDED: &str = "Create+Start − runc run of the same bundle, paired";
/// The median of the per-sample ratios of Create+Start to the same-bundle run after it.
pub const SAME_BUNDLE_PAIRED: &str = "Create+Start ÷ runc run of the same bundle (paired p50)";

/// A goal of the issue for bosun's figure: (row name, limit, shown as).
struct Goal {
    row: &'static str,
    limit: f64,
    text: &'static str,
}

/// The goals ("Measure" in issue 3), by exact row name.
const GOALS: [Goal; 6] = [
    Goal {
        row: "RunPodSandbox p50",
        limit: 15.0,
        text: "≤ 15 ms",
    },
    Goal {
        row: SAME_BUNDLE_RATIO,
        limit: 1.2,
        text: "≤ 1.2×",
    },
    Goal {
        row: "KILL lateness p50: StopContainer returned",
        limit: 10.0,
        text: "≤ 10 ms",
    },
    Goal {
        row: "per pod at 10 pods: RSS",
        limit: 2.0,
        text: "≤ 2 MiB",
    },
    Goal {
        row: "per pod at 50 pods: RSS",
        limit: 2.0,
        text: "≤ 2 MiB",
    },
    Goal {
        row: "ListContainers p50",
        limit: 2000.0,
        text: "≤ 2 ms",
    },
];

/// Rows in the order first recorded, notes, and why a runtime has no figures.
pub struct Report {
    load_before: String,
    rows: Vec<Row>,
    notes: Vec<String>,
    failed: BTreeMap<Kind, String>,
}

impl Report {
    pub fn new() -> Report {
        Report {
            load_before: load_average(),
            rows: Vec::new(),
            notes: Vec::new(),
            failed: BTreeMap::new(),
        }
    }

    pub fn record(&mut self, name: &str, unit: Unit, kind: Kind, v: f64) {
        let i = match self.rows.iter().position(|r| r.name == name) {
            Some(i) => i,
            None => {
                self.rows.push(Row {
                    name: name.to_string(),
                    unit,
                    values: BTreeMap::new(),
                });
                self.rows.len() - 1
            }
        };
        self.rows[i].values.insert(kind, v);
    }

    pub fn value(&self, name: &str, kind: Kind) -> Option<f64> {
        self.rows
            .iter()
            .find(|r| r.name == name)
            .and_then(|r| r.values.get(&kind).copied())
    }

    /// A line for the notes under the table.
    pub fn note(&mut self, text: impl Into<String>) {
        self.notes.push(text.into());
    }

    /// `kind` stopped with `error` (its rows keep what was measured before).
    pub fn failed(&mut self, kind: Kind, error: String) {
        self.failed.insert(kind, error);
    }

    pub fn render(&self, header: &str) -> anyhow::Result<String> {
        let mut s = String::new();
        writeln!(s, "## bosun vs containerd: pods and containers (issue 3)\n")?;
        writeln!(s, "{}", machine())?;
        writeln!(
            s,
            "1-minute load average {} before, {} after.\n",
            self.load_before,
            load_average()
        )?;
        writeln!(s, "{header}\n")?;
        writeln!(
            s,
            "| metric | bosun | containerd | ratio (containerd/bosun) |"
        )?;
        writeln!(s, "| --- | --- | --- | --- |")?;
        for r in &self.rows {
            let show = |k: Kind| {
                r.values
                    .get(&k)
                    .map_or_else(|| "—".into(), |v| r.unit.show(*v))
            };
            let ratio = match (r.values.get(&Kind::Bosun), r.values.get(&Kind::Containerd)) {
                (Some(b), Some(c)) if r.compared() && b.abs() >= 0.01 => format!("{:.2}×", c / b),
                _ => "—".to_string(),
            };
            writeln!(
                s,
                "| {} | {} | {} | {ratio} |",
                r.name,
                show(Kind::Bosun),
                show(Kind::Containerd)
            )?;
        }
        writeln!(s, "\n### Summary\n")?;
        for line in self.summary() {
            writeln!(s, "- {line}")?;
        }
        writeln!(s, "\n### Notes\n")?;
        for line in &self.notes {
            writeln!(s, "- {line}")?;
        }
        Ok(s)
    }

    /// Goals met or missed, the headline ratios, and what failed.
    fn summary(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (kind, e) in &self.failed {
            out.push(format!("{} has no (or partial) figures: {e}", kind.name()));
        }
        let mut goals = Vec::new();
        for g in &GOALS {
            let Some(r) = self.rows.iter().find(|r| r.name == g.row) else {
                continue;
            };
            if let Some(b) = r.values.get(&Kind::Bosun) {
                let ok = if *b <= g.limit { "met" } else { "MISSED" };
                goals.push(format!(
                    "{} {} (goal {}) {ok}",
                    g.row,
                    r.unit.show(*b),
                    g.text
                ));
            }
        }
        if goals.is_empty() {
            out.push("bosun goals: no bosun figures to check.".into());
        } else {
            out.push(format!("bosun goals: {}.", goals.join("; ")));
        }
        let mut faster = Vec::new();
        for r in &self.rows {
            if let (Some(b), Some(c)) =
                (r.values.get(&Kind::Bosun), r.values.get(&Kind::Containerd))
            {
                if r.name.ends_with("p50") && r.compared() && *b >= 0.01 {
                    faster.push(format!("{} {:.1}×", r.name.trim_end_matches(" p50"), c / b));
                }
            }
        }
        if !faster.is_empty() {
            out.push(format!(
                "containerd/bosun at p50 (above 1: bosun faster): {}.",
                faster.join(", ")
            ));
        }
        for k in [Kind::Bosun, Kind::Containerd] {
            let get = |n: &str| self.value(n, k);
            if let (Some(p), Some(cs), Some(x)) = (
                get("RunPodSandbox p50"),
                get("CreateContainer+StartContainer p50"),
                get("Create+Start ÷ bare runc run (p50)"),
            ) {
                out.push(format!(
                    "{}: RunPodSandbox {p:.1} ms, Create+Start {cs:.1} ms ({x:.2}× a bare runc run){}{}.",
                    k.name(),
                    get("KILL lateness p50: StopContainer returned")
                        .map_or_else(String::new, |l| format!(", KILL {l:.1} ms past the deadline")),
                    get("per pod at 50 pods: RSS")
                        .or_else(|| get("per pod at 10 pods: RSS"))
                        .map_or_else(String::new, |m| format!(", {m:.2} MiB RSS per pod")),
                ));
            }
        }
        out
    }
}

/// The first field of /proc/loadavg.
fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split(' ').next().unwrap_or("?").to_string()
}

/// nproc, kernel, CPU, memory, cgroup layout and the versions.
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
            .map(|o| {
                let text = String::from_utf8_lossy(&o.stdout);
                text.lines().next().unwrap_or("").trim().to_string()
            })
            .unwrap_or_default()
    };
    let cgroups = if std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        "cgroup v2"
    } else {
        "cgroup v1"
    };
    format!(
        "Machine: {nproc} CPUs ({cpu}), {mem:.1} GiB RAM, kernel {}, {cgroups}. {}; {}; {}.",
        kernel.trim(),
        version(BOSUN),
        version("containerd"),
        version("runc")
    )
}
