//! Tasks shared by whoever waits for them, one per key: joined while they run, stopped when their last waiter is cancelled.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::future::{BoxFuture, FutureExt, Shared};
use tokio::task::AbortHandle;

use crate::error::{Error, Result};

/// The result of a task, as each waiter gets it.
pub(crate) type Done<T> = Shared<BoxFuture<'static, Result<T>>>;

struct Entry<T, X> {
    id: u64,
    done: Done<T>,
    extra: X,
    waiters: usize,
    /// Every waiter left and the task was aborted; it leaves the table once it has stopped,
    /// and nobody joins it meanwhile.
    stopping: bool,
    abort: AbortHandle,
}

struct Table<K, T, X> {
    entries: HashMap<K, Entry<T, X>>,
    next_id: u64,
}

/// Tasks by key; clones share the table. `X` is what each waiter gets beside the result
/// (a progress receiver).
///
/// Pulls and blob downloads run in tasks of their own so that concurrent callers share one. A
/// caller that goes away (a PullImage whose deadline passed, issue 28 item 3) leaves the task;
/// when none is left, the task is aborted rather than left downloading for nobody.
pub(crate) struct TaskTable<K, T, X = ()> {
    inner: Arc<Mutex<Table<K, T, X>>>,
}

impl<K, T, X> Clone for TaskTable<K, T, X> {
    fn clone(&self) -> Self {
        TaskTable {
            inner: self.inner.clone(),
        }
    }
}

fn lock<K, T, X>(m: &Mutex<Table<K, T, X>>) -> MutexGuard<'_, Table<K, T, X>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<K, T, X> TaskTable<K, T, X>
where
    K: Eq + Hash + Clone + Send + 'static,
    T: Clone + Send + Sync + 'static,
    X: Clone + Send + 'static,
{
    /// An empty table.
    pub(crate) fn new() -> Self {
        TaskTable {
            inner: Arc::new(Mutex::new(Table {
                entries: HashMap::new(),
                next_id: 0,
            })),
        }
    }

    /// Tasks in the table (running, or stopping).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.inner).entries.len()
    }

    /// Joins the task running for `key`, or starts `start()`'s future as one (with its `X`).
    /// `None` when `ready()`, checked under the table's lock, says there is nothing to do (a
    /// finishing task makes its result visible before it leaves the table). A task whose
    /// waiters all left is waited out first, so one key never has two tasks running.
    pub(crate) async fn join<F>(
        &self,
        key: &K,
        ready: impl Fn() -> bool,
        start: impl FnOnce() -> (F, X),
    ) -> Option<Waiter<K, T, X>>
    where
        F: Future<Output = Result<T>> + Send + 'static,
    {
        let mut start = Some(start);
        loop {
            let stopping = {
                let mut table = lock(&self.inner);
                if ready() {
                    return None;
                }
                match table.entries.get_mut(key) {
                    Some(e) if e.stopping => e.done.clone(),
                    Some(e) => {
                        e.waiters += 1;
                        return Some(self.waiter(key, e));
                    }
                    None => {
                        // Only reached once: this branch returns.
                        let (fut, extra) = start.take()?();
                        let id = table.next_id;
                        table.next_id += 1;
                        let entry = self.spawn(key, id, fut, extra);
                        let e = table.entries.entry(key.clone()).or_insert(entry);
                        return Some(self.waiter(key, e));
                    }
                }
            };
            let _ = stopping.await;
        }
    }

    fn waiter(&self, key: &K, e: &Entry<T, X>) -> Waiter<K, T, X> {
        Waiter {
            table: self.clone(),
            key: key.clone(),
            id: e.id,
            done: e.done.clone(),
            extra: e.extra.clone(),
        }
    }

    /// Spawns `fut` with one waiter. A second task removes the entry once the first has ended
    /// however it ended (returned, panicked, aborted), after its future was dropped whole.
    fn spawn<F>(&self, key: &K, id: u64, fut: F, extra: X) -> Entry<T, X>
    where
        F: Future<Output = Result<T>> + Send + 'static,
    {
        let work = tokio::spawn(fut);
        let abort = work.abort_handle();
        let inner = self.inner.clone();
        let k = key.clone();
        let reaper = tokio::spawn(async move {
            let res = work.await.unwrap_or_else(|e| {
                Err(if e.is_cancelled() {
                    Error::unavailable("stopped: every caller went away")
                } else {
                    Error::internal(format!("task: {e}"))
                })
            });
            let mut table = lock(&inner);
            if table.entries.get(&k).is_some_and(|e| e.id == id) {
                table.entries.remove(&k);
            }
            res
        });
        let done = async move {
            reaper
                .await
                .unwrap_or_else(|e| Err(Error::internal(format!("task: {e}"))))
        }
        .boxed()
        .shared();
        Entry {
            id,
            done,
            extra,
            waiters: 1,
            stopping: false,
            abort,
        }
    }
}

/// One caller's share of a task. Dropping it before the task ends leaves the task; the last
/// one to leave stops it.
pub(crate) struct Waiter<K: Eq + Hash, T, X> {
    table: TaskTable<K, T, X>,
    key: K,
    id: u64,
    done: Done<T>,
    extra: X,
}

impl<K: Eq + Hash, T, X> Waiter<K, T, X> {
    /// The task's result, shared with every other waiter.
    pub(crate) fn done(&self) -> Done<T> {
        self.done.clone()
    }

    /// What the task was started with beside its future.
    pub(crate) fn extra(&self) -> &X {
        &self.extra
    }
}

impl<K: Eq + Hash, T, X> Drop for Waiter<K, T, X> {
    fn drop(&mut self) {
        let mut table = lock(&self.table.inner);
        let Some(e) = table.entries.get_mut(&self.key).filter(|e| e.id == self.id) else {
            return;
        };
        e.waiters = e.waiters.saturating_sub(1);
        if e.waiters == 0 {
            // Aborting a task that already ended does nothing; its entry is about to go.
            e.stopping = true;
            e.abort.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// A task that counts its starts, sleeps `ms`, then counts its ends.
    fn counted(
        starts: &Arc<AtomicUsize>,
        ends: &Arc<AtomicUsize>,
        ms: u64,
    ) -> impl FnOnce() -> (BoxFuture<'static, Result<u32>>, ()) {
        let (s, e) = (starts.clone(), ends.clone());
        move || {
            s.fetch_add(1, Ordering::SeqCst);
            let fut = async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                e.fetch_add(1, Ordering::SeqCst);
                Ok(7)
            };
            (fut.boxed(), ())
        }
    }

    #[tokio::test]
    async fn concurrent_waiters_share_one_task() {
        let t: TaskTable<&str, u32> = TaskTable::new();
        let (starts, ends) = (Arc::default(), Arc::default());
        let a = t.join(&"k", || false, counted(&starts, &ends, 50)).await;
        let b = t.join(&"k", || false, counted(&starts, &ends, 50)).await;
        let (a, b) = (a.expect("a"), b.expect("b"));
        let (ra, rb) = tokio::join!(a.done(), b.done());
        assert_eq!((ra.expect("a"), rb.expect("b")), (7, 7));
        assert_eq!(starts.load(Ordering::SeqCst), 1);
        drop((a, b));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(t.len(), 0);
    }

    #[tokio::test]
    async fn the_last_waiter_leaving_stops_the_task_and_a_new_one_starts_after() {
        let t: TaskTable<&str, u32> = TaskTable::new();
        let (starts, ends) = (Arc::default(), Arc::default());
        let a = t.join(&"k", || false, counted(&starts, &ends, 200)).await;
        let b = t.join(&"k", || false, counted(&starts, &ends, 200)).await;
        drop(a);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(t.len(), 1, "one waiter is left: the task goes on");
        drop(b);
        let c = t
            .join(&"k", || false, counted(&starts, &ends, 10))
            .await
            .expect("c");
        assert_eq!(c.done().await.expect("c"), 7);
        assert_eq!(starts.load(Ordering::SeqCst), 2);
        assert_eq!(ends.load(Ordering::SeqCst), 1, "the first task never ended");
    }

    #[tokio::test]
    async fn ready_under_the_lock_starts_nothing() {
        let t: TaskTable<&str, u32> = TaskTable::new();
        let (starts, ends) = (Arc::default(), Arc::default());
        assert!(t
            .join(&"k", || true, counted(&starts, &ends, 10))
            .await
            .is_none());
        assert_eq!(starts.load(Ordering::SeqCst), 0);
    }
}
