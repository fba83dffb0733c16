//! Versioned container and sandbox statuses whose state is derived only from timestamps.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Reason for a zero exit without an OOM kill.
pub const REASON_COMPLETED: &str = "Completed";
/// Reason for a non-zero exit without an OOM kill.
pub const REASON_ERROR: &str = "Error";
/// Reason when the cgroup recorded an OOM kill (never inferred from 137).
pub const REASON_OOM_KILLED: &str = "OOMKilled";
/// Reason when the process could not be started (containerd's `errorStartReason`).
pub const REASON_START_ERROR: &str = "StartError";
/// Reason when the outcome is unknown (containerd's `unknownExitReason`).
pub const REASON_UNKNOWN: &str = "Unknown";
/// Exit code reported for a failed start (containerd's `errorStartExitCode`).
pub const EXIT_CODE_START_ERROR: i32 = 128;
/// Exit code reported when the real one is unknown (containerd's `unknownExitCode`).
pub const EXIT_CODE_UNKNOWN: i32 = 255;

/// Unix nanoseconds now.
pub fn now_ns() -> i64 {
    crate::monitor::exit_record::unix_nanos(SystemTime::now())
}

/// The kubelet-facing reason for an exit: OOMKilled, else Completed (0) or Error.
pub fn reason_for(exit_code: i32, oom_killed: bool) -> &'static str {
    match (oom_killed, exit_code) {
        (true, _) => REASON_OOM_KILLED,
        (false, 0) => REASON_COMPLETED,
        (false, _) => REASON_ERROR,
    }
}

/// A container's state as CRI reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContainerState {
    /// Created, not started.
    Created,
    /// Started, not finished.
    Running,
    /// Finished (or failed to start).
    Exited,
    /// Unreadable or inconsistent state.
    Unknown,
}

/// A container's checkpointed status; `version` grows by one per write.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ContainerStatus {
    /// Bumped by the store on every successful write.
    pub version: u64,
    /// Unix ns of creation (0 = not yet).
    pub created_ns: i64,
    /// Unix ns of start (0 = not yet).
    pub started_ns: i64,
    /// Unix ns of exit (0 = not yet).
    pub finished_ns: i64,
    /// Exit code (128 + signal when signalled).
    pub exit_code: i32,
    /// Completed, Error, OOMKilled, StartError or Unknown.
    pub reason: String,
    /// Human-readable detail (start error, recovery note).
    pub message: String,
    /// The init's host pid (0 = none).
    pub pid: u32,
    /// The monitor's pid (0 = none).
    pub monitor_pid: u32,
    /// A removal is in progress.
    pub removing: bool,
    /// The state could not be determined.
    pub unknown: bool,
    /// Resources set by UpdateContainerResources (`None`: those of the create request).
    pub resources: Option<crate::oci::Resources>,
    /// The identity the process runs as, resolved at create.
    pub user: Option<UserIds>,
}

/// A resolved process identity.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserIds {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary group ids.
    pub groups: Vec<u32>,
}

fn precondition(what: &str, state: impl std::fmt::Debug) -> Error {
    Error::precondition(format!("{what}: container is {state:?}"))
}

impl ContainerStatus {
    /// A fresh status: created at `created_ns`.
    pub fn created(created_ns: i64) -> Self {
        ContainerStatus {
            created_ns,
            ..Default::default()
        }
    }

    /// The status of an object whose status could not be read: UNKNOWN with `message`.
    pub fn unreadable(message: impl Into<String>) -> Self {
        ContainerStatus {
            exit_code: EXIT_CODE_UNKNOWN,
            reason: REASON_UNKNOWN.to_string(),
            message: message.into(),
            unknown: true,
            ..Default::default()
        }
    }

    /// The state, derived from the timestamps and the unknown flag only.
    ///
    /// Ordering between timestamps is not checked (a wall-clock step must not break a healthy
    /// container); missing or negative predecessors make the state UNKNOWN.
    pub fn state(&self) -> ContainerState {
        let (c, s, f) = (self.created_ns, self.started_ns, self.finished_ns);
        if self.unknown || c <= 0 || s < 0 || f < 0 {
            return ContainerState::Unknown;
        }
        match (s > 0, f > 0) {
            (false, false) => ContainerState::Created,
            (true, false) => ContainerState::Running,
            // Finished without start is a failed start: EXITED.
            (_, true) => ContainerState::Exited,
        }
    }

    /// CREATED → RUNNING at `ns` with init `pid`.
    pub fn start(&mut self, ns: i64, pid: u32) -> Result<()> {
        let st = self.state();
        if st != ContainerState::Created || self.removing {
            return Err(precondition("start", st));
        }
        if ns <= 0 || pid == 0 {
            return Err(Error::invalid("start: timestamp and pid must be positive"));
        }
        self.started_ns = ns;
        self.pid = pid;
        Ok(())
    }

    /// RUNNING (or UNKNOWN, once the real exit is seen) → EXITED with `code` at `ns`.
    pub fn exit(&mut self, ns: i64, code: i32, oom_killed: bool) -> Result<()> {
        let st = self.state();
        if !matches!(st, ContainerState::Running | ContainerState::Unknown) {
            return Err(precondition("exit", st));
        }
        if ns <= 0 {
            return Err(Error::invalid("exit: timestamp must be positive"));
        }
        if self.created_ns <= 0 {
            self.created_ns = ns;
        }
        if self.started_ns <= 0 {
            self.started_ns = ns;
        }
        self.unknown = false;
        self.finished_ns = ns;
        self.exit_code = code;
        self.reason = reason_for(code, oom_killed).to_string();
        Ok(())
    }

    /// CREATED → EXITED because the start failed: exit code 128, reason StartError, `message`.
    pub fn fail_start(&mut self, ns: i64, message: impl Into<String>) -> Result<()> {
        let st = self.state();
        if st != ContainerState::Created {
            return Err(precondition("fail start", st));
        }
        if ns <= 0 {
            return Err(Error::invalid("fail start: timestamp must be positive"));
        }
        self.pid = 0;
        self.finished_ns = ns;
        self.exit_code = EXIT_CODE_START_ERROR;
        self.reason = REASON_START_ERROR.to_string();
        self.message = message.into();
        Ok(())
    }

    /// Marks UNKNOWN with `message` (reason Unknown, exit code 255).
    pub fn mark_unknown(&mut self, message: impl Into<String>) {
        self.unknown = true;
        self.exit_code = EXIT_CODE_UNKNOWN;
        self.reason = REASON_UNKNOWN.to_string();
        self.message = message.into();
    }

    /// Flags a removal in progress; refused while RUNNING or when already removing.
    pub fn set_removing(&mut self) -> Result<()> {
        let st = self.state();
        if st == ContainerState::Running {
            return Err(precondition("remove", st));
        }
        if self.removing {
            return Err(Error::precondition("remove: already being removed"));
        }
        self.removing = true;
        Ok(())
    }
}

/// A sandbox's state; CRI reports only Ready as SANDBOX_READY, everything else NOTREADY.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SandboxState {
    /// Created, setup not finished.
    Created,
    /// Set up and not stopped.
    Ready,
    /// Stopped.
    NotReady,
    /// Unreadable or inconsistent state.
    Unknown,
}

impl SandboxState {
    /// Whether CRI reports SANDBOX_READY.
    pub fn is_ready(self) -> bool {
        self == SandboxState::Ready
    }
}

/// A sandbox's checkpointed status; `version` grows by one per write.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SandboxStatus {
    /// Bumped by the store on every successful write.
    pub version: u64,
    /// Unix ns of creation (0 = not yet).
    pub created_ns: i64,
    /// Unix ns when setup finished (0 = not yet).
    pub ready_ns: i64,
    /// Unix ns of stop (0 = not yet).
    pub stopped_ns: i64,
    /// The infra process's host pid (0 = none).
    pub pid: u32,
    /// Detail (recovery note).
    pub message: String,
    /// A removal is in progress.
    pub removing: bool,
    /// The state could not be determined.
    pub unknown: bool,
    /// Pod-level resources last given by UpdatePodSandboxResources (the kubelet has applied
    /// them to the pod cgroup already; recorded for status and plugins).
    pub resources: Option<crate::oci::Resources>,
    /// The pod overhead given with them.
    pub overhead: Option<crate::oci::Resources>,
    /// The pod's addresses from CNI ADD, IPv4 first (empty: host network or not attached).
    pub ips: Vec<String>,
    /// The pod network is attached (ADD succeeded, DEL not yet). The network's own record
    /// says what DEL must undo; this flag is what PodSandboxStatus reports from.
    pub network_attached: bool,
}

impl SandboxStatus {
    /// A fresh status: created at `created_ns`.
    pub fn created(created_ns: i64) -> Self {
        SandboxStatus {
            created_ns,
            ..Default::default()
        }
    }

    /// The status of a sandbox whose status could not be read: UNKNOWN with `message`.
    pub fn unreadable(message: impl Into<String>) -> Self {
        SandboxStatus {
            message: message.into(),
            unknown: true,
            ..Default::default()
        }
    }

    /// The state, derived from the timestamps and the unknown flag only.
    pub fn state(&self) -> SandboxState {
        let (c, r, s) = (self.created_ns, self.ready_ns, self.stopped_ns);
        if self.unknown || c <= 0 || r < 0 || s < 0 {
            return SandboxState::Unknown;
        }
        match (r > 0, s > 0) {
            (_, true) => SandboxState::NotReady,
            (true, false) => SandboxState::Ready,
            (false, false) => SandboxState::Created,
        }
    }

    /// CREATED → READY at `ns` with infra `pid` (0 if none).
    pub fn ready(&mut self, ns: i64, pid: u32) -> Result<()> {
        let st = self.state();
        if st != SandboxState::Created || self.removing {
            return Err(Error::precondition(format!("ready: sandbox is {st:?}")));
        }
        if ns <= 0 {
            return Err(Error::invalid("ready: timestamp must be positive"));
        }
        self.ready_ns = ns;
        self.pid = pid;
        Ok(())
    }

    /// Any state but NOTREADY → NOTREADY at `ns` (an UNKNOWN sandbox becomes known-stopped).
    pub fn stop(&mut self, ns: i64) -> Result<()> {
        let st = self.state();
        if st == SandboxState::NotReady {
            return Err(Error::precondition("stop: sandbox is already stopped"));
        }
        if ns <= 0 {
            return Err(Error::invalid("stop: timestamp must be positive"));
        }
        if self.created_ns <= 0 {
            self.created_ns = ns;
        }
        self.unknown = false;
        self.stopped_ns = ns;
        Ok(())
    }

    /// Flags a removal in progress; refused while READY or when already removing.
    pub fn set_removing(&mut self) -> Result<()> {
        let st = self.state();
        if st == SandboxState::Ready {
            return Err(Error::precondition("remove: sandbox is Ready"));
        }
        if self.removing {
            return Err(Error::precondition("remove: already being removed"));
        }
        self.removing = true;
        Ok(())
    }
}
