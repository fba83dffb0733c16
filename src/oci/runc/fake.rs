//! [`FakeRuntime`]: an in-memory [`OciRuntime`] for unit tests — records every call, keeps container states, and returns scripted errors and exec results.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::oci::runc::{ExecOutput, OciRuntime, State};

/// One call made to the fake, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `start(id)`.
    Start(String),
    /// `kill(id, signal, all)`.
    Kill(String, i32, bool),
    /// `delete(id, force)`.
    Delete(String, bool),
    /// `state(id)`.
    State(String),
    /// `update(id, resources)`.
    Update(String, serde_json::Value),
    /// `exec(id, args, timeout)`.
    Exec(String, Vec<String>, Option<Duration>),
    /// `checkpoint(id)`.
    Checkpoint(String),
}

#[derive(Default)]
struct Inner {
    calls: Vec<Call>,
    states: HashMap<String, State>,
    failures: HashMap<&'static str, VecDeque<Error>>,
    execs: VecDeque<ExecOutput>,
    dump_time: Duration,
}

/// A scripted OCI runtime. `start` makes a known container `running`, `kill` with SIGKILL
/// makes it `stopped`, `delete` forgets it; other calls only record.
#[derive(Default)]
pub struct FakeRuntime {
    inner: Mutex<Inner>,
}

impl FakeRuntime {
    /// An empty fake.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers container `id` as `created` with init `pid`.
    pub fn add_created(&self, id: &str, pid: i32) {
        let state = State {
            status: "created".into(),
            pid,
            bundle: PathBuf::from("/fake").join(id),
        };
        self.lock().states.insert(id.into(), state);
    }

    /// The next call of operation `op` ("start", "kill", "delete", "state", "update",
    /// "exec") fails with `error`; several queue up in order.
    pub fn fail_next(&self, op: &'static str, error: Error) {
        self.lock().failures.entry(op).or_default().push_back(error);
    }

    /// The next `exec` returns `output` (default: exit 0, no output).
    pub fn push_exec(&self, output: ExecOutput) {
        self.lock().execs.push_back(output);
    }

    /// How long a `checkpoint` (a CRIU dump) takes from now on; a SIGKILL of the container
    /// meanwhile makes it fail at its end, as CRIU does when its processes die.
    pub fn set_dump_time(&self, d: Duration) {
        self.lock().dump_time = d;
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// The current state of `id`, without recording a call.
    pub fn peek(&self, id: &str) -> Option<State> {
        self.lock().states.get(id).cloned()
    }

    /// Records `call`; returns the scripted failure for `op`, if any.
    fn record(&self, op: &'static str, call: Call) -> Result<MutexGuard<'_, Inner>> {
        let mut inner = self.lock();
        inner.calls.push(call);
        match inner.failures.get_mut(op).and_then(VecDeque::pop_front) {
            Some(e) => Err(e),
            None => Ok(inner),
        }
    }
}

fn missing(id: &str, op: &str) -> Error {
    Error::not_found(format!(
        "container {id}: runc {op}: container does not exist"
    ))
}

#[tonic::async_trait]
impl OciRuntime for FakeRuntime {
    async fn start(&self, id: &str) -> Result<()> {
        let mut inner = self.record("start", Call::Start(id.into()))?;
        let state = inner
            .states
            .get_mut(id)
            .ok_or_else(|| missing(id, "start"))?;
        state.status = "running".into();
        Ok(())
    }

    async fn kill(&self, id: &str, signal: i32, all: bool) -> Result<()> {
        let mut inner = self.record("kill", Call::Kill(id.into(), signal, all))?;
        let state = inner
            .states
            .get_mut(id)
            .ok_or_else(|| missing(id, "kill"))?;
        if signal == libc::SIGKILL {
            state.status = "stopped".into();
            state.pid = 0;
        }
        Ok(())
    }

    async fn delete(&self, id: &str, force: bool) -> Result<()> {
        let mut inner = self.record("delete", Call::Delete(id.into(), force))?;
        inner
            .states
            .remove(id)
            .map(drop)
            .ok_or_else(|| missing(id, "delete"))
    }

    async fn state(&self, id: &str) -> Result<Option<State>> {
        let inner = self.record("state", Call::State(id.into()))?;
        Ok(inner.states.get(id).cloned())
    }

    async fn update(&self, id: &str, resources: &serde_json::Value) -> Result<()> {
        let inner = self.record("update", Call::Update(id.into(), resources.clone()))?;
        inner
            .states
            .contains_key(id)
            .then_some(())
            .ok_or_else(|| missing(id, "update"))
    }

    async fn exec(
        &self,
        id: &str,
        process: &oci_spec::runtime::Process,
        timeout: Option<Duration>,
        cap: usize,
    ) -> Result<ExecOutput> {
        let args = process.args().clone().unwrap_or_default();
        let mut inner = self.record("exec", Call::Exec(id.into(), args, timeout))?;
        if !inner.states.contains_key(id) {
            return Err(missing(id, "exec"));
        }
        let mut out = inner.execs.pop_front().unwrap_or_default();
        out.stdout.truncate(cap);
        out.stderr.truncate(cap);
        Ok(out)
    }

    async fn checkpoint(&self, id: &str, dump: &crate::oci::runc::checkpoint::Dump) -> Result<()> {
        let end = {
            let inner = self.record("checkpoint", Call::Checkpoint(id.into()))?;
            tokio::time::Instant::now() + inner.dump_time
        };
        // Like CRIU at worst: the dump runs its course (pages already collected are written)
        // and fails at the end when its processes died meanwhile.
        let mut died = false;
        while tokio::time::Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(10)).await;
            died |= self.peek(id).is_none_or(|s| s.status == "stopped");
        }
        if died {
            return Err(Error::internal(format!(
                "container {id}: runc checkpoint: criu failed: the dumped process died"
            )));
        }
        std::fs::write(dump.images.join("inventory.img"), b"fake")
            .map_err(|e| Error::internal(format!("container {id}: fake dump: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[tokio::test]
    async fn records_calls_and_follows_the_lifecycle() {
        let fake = FakeRuntime::new();
        let rt: &dyn OciRuntime = &fake;
        fake.add_created("c1", 7);
        rt.start("c1").await.expect("start");
        let state = rt.state("c1").await.expect("state").expect("known");
        assert_eq!((state.status.as_str(), state.pid), ("running", 7));
        rt.kill("c1", libc::SIGKILL, true).await.expect("kill");
        assert_eq!(fake.peek("c1").map(|s| s.status), Some("stopped".into()));
        rt.delete("c1", true).await.expect("delete");
        assert_eq!(rt.state("c1").await, Ok(None));
        let e = rt.kill("c1", 15, false).await.expect_err("gone");
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert_eq!(
            fake.calls(),
            [
                Call::Start("c1".into()),
                Call::State("c1".into()),
                Call::Kill("c1".into(), 9, true),
                Call::Delete("c1".into(), true),
                Call::State("c1".into()),
                Call::Kill("c1".into(), 15, false),
            ]
        );
    }

    #[tokio::test]
    async fn scripted_failures_and_exec_results() {
        let fake = FakeRuntime::new();
        fake.add_created("c1", 7);
        fake.fail_next("start", Error::internal("boom"));
        assert_eq!(fake.start("c1").await, Err(Error::internal("boom")));
        fake.start("c1").await.expect("second start works");
        fake.push_exec(ExecOutput {
            exit_code: 7,
            stdout: b"hello".to_vec(),
            ..ExecOutput::default()
        });
        let mut process = oci_spec::runtime::Process::default();
        process.set_args(Some(vec!["echo".into()]));
        let out = fake
            .exec("c1", &process, Some(Duration::from_secs(1)), 3)
            .await
            .expect("exec");
        assert_eq!((out.exit_code, out.stdout.as_slice()), (7, &b"hel"[..]));
        let last = fake.calls().pop();
        let want = Call::Exec(
            "c1".into(),
            vec!["echo".into()],
            Some(Duration::from_secs(1)),
        );
        assert_eq!(last, Some(want));
    }
}
