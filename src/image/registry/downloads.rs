//! Shared blob downloads: one task per digest, joined by concurrent pulls, stopped when no pull waits, resumed from what it stored.

use std::sync::Arc;

use futures::FutureExt;
use tokio::sync::watch;

use crate::error::{Error, ErrorKind, Result};
use crate::image::content::{ContentStore, Ingest};
use crate::image::digest::Digest;
use crate::image::manifest::Descriptor;
use crate::image::reference::Reference;
use crate::image::registry::{Credentials, Endpoint, RegistryClient};
use crate::image::tasks::{TaskTable, Waiter};

/// Progress is reported at most once per this many bytes of a blob (and at its end).
const PROGRESS_STEP: u64 = 512 << 10;
/// A waiter whose joined download failed tries this many times in all before giving up.
const MAX_ATTEMPTS: usize = 3;

/// Where a blob comes from.
#[derive(Debug, Clone)]
pub(crate) struct Source {
    /// The endpoint that served the manifest.
    pub endpoint: Endpoint,
    /// The repository's reference.
    pub reference: Reference,
    /// The caller's credentials.
    pub creds: Credentials,
}

/// What happened to one blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BlobEvent {
    /// It was in the store already.
    Cached,
    /// Bytes received so far.
    Progress(u64),
    /// Downloaded, verified and committed.
    Done,
}

/// A download in flight, as one waiter holds it; its extra is the progress receiver.
type Flight = Waiter<Digest, (), watch::Receiver<u64>>;

struct Inner {
    registry: RegistryClient,
    content: ContentStore,
    flights: TaskTable<Digest, (), watch::Receiver<u64>>,
}

/// The table of downloads in flight; clones share it.
#[derive(Clone)]
pub(crate) struct Downloads {
    inner: Arc<Inner>,
}

impl Downloads {
    /// Downloads from `registry` into `content`.
    pub(crate) fn new(registry: RegistryClient, content: ContentStore) -> Self {
        Downloads {
            inner: Arc::new(Inner {
                registry,
                content,
                flights: TaskTable::new(),
            }),
        }
    }

    /// The store blobs land in.
    pub(crate) fn content(&self) -> &ContentStore {
        &self.inner.content
    }

    /// The registry client.
    pub(crate) fn registry(&self) -> &RegistryClient {
        &self.inner.registry
    }

    /// Downloads still running.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.inner.flights.len()
    }

    /// Makes blob `desc` present in the store: already there, joining a download in flight, or
    /// starting one in its own task. A waiter whose joined download failed starts its own.
    /// Dropping the returned future leaves the download, which stops when nobody else waits
    /// (keeping its bytes for the next one).
    pub(crate) async fn fetch(
        &self,
        src: &Source,
        desc: &Descriptor,
        mut on_event: impl FnMut(BlobEvent),
    ) -> Result<()> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut mine = false;
            let content = &self.inner.content;
            // Checked under the table's lock: a finishing download commits before leaving it.
            let flight = self
                .inner
                .flights
                .join(
                    &desc.digest,
                    || content.contains(&desc.digest),
                    || {
                        mine = true;
                        self.start(src.clone(), desc.clone())
                    },
                )
                .await;
            let Some(flight) = flight else {
                on_event(BlobEvent::Cached);
                return Ok(());
            };
            match follow(&flight, desc.size, &mut on_event).await {
                Ok(()) => {
                    on_event(BlobEvent::Done);
                    return Ok(());
                }
                Err(e) if mine || attempt >= MAX_ATTEMPTS => return Err(e),
                Err(e) => {
                    tracing::debug!(digest = %desc.digest, error = %e, "joined download failed");
                }
            }
        }
    }

    /// The download of `desc`, to run as a task, and its progress receiver.
    fn start(
        &self,
        src: Source,
        desc: Descriptor,
    ) -> (
        futures::future::BoxFuture<'static, Result<()>>,
        watch::Receiver<u64>,
    ) {
        let (tx, progress) = watch::channel(0u64);
        let inner = self.inner.clone();
        let task = async move {
            let content = inner.content.clone();
            let (digest, size) = (desc.digest.clone(), desc.size);
            // Hashes again what an interrupted download stored: keep it off the async workers.
            let mut ingest = tokio::task::spawn_blocking(move || content.resume(&digest, size))
                .await
                .map_err(|e| Error::internal(format!("resume task: {e}")))??;
            if ingest.written() > 0 {
                tracing::info!(digest = %desc.digest, from = ingest.written(), "resuming blob download");
            }
            download(&inner.registry, &src, &desc, &mut ingest, &tx).await?;
            // Commit fsyncs the whole blob: keep it off the async workers.
            tokio::task::spawn_blocking(move || ingest.commit())
                .await
                .map_err(|e| Error::internal(format!("commit task: {e}")))?
        };
        (task.boxed(), progress)
    }
}

/// Fetches `desc` into `ingest` until it verifies. A digest mismatch is fetched once more from
/// byte 0 (the stored part may be what was wrong); a second mismatch, or an answer no retry
/// can mend, discards the stored bytes. An ingest left for other failures resumes next time.
async fn download(
    registry: &RegistryClient,
    src: &Source,
    desc: &Descriptor,
    ingest: &mut Ingest,
    progress: &watch::Sender<u64>,
) -> Result<()> {
    let (ep, r, creds) = (&src.endpoint, &src.reference, &src.creds);
    let mut refetched = false;
    loop {
        let report = |n| {
            progress.send_replace(n);
        };
        if let Err(e) = registry
            .fetch_blob(ep, r, creds, desc, ingest, report)
            .await
        {
            if e.kind() == ErrorKind::InvalidArgument {
                // No start for the next download. Should truncating fail, the digest check
                // still refuses what is left.
                let _ = ingest.restart();
            }
            return Err(e);
        }
        match ingest.verify() {
            Ok(()) => return Ok(()),
            Err(e) if !refetched => {
                tracing::warn!(digest = %desc.digest, error = %e, "blob does not verify, fetching it again from byte 0");
                refetched = true;
                ingest.restart()?;
            }
            Err(e) => {
                let _ = ingest.restart();
                return Err(Error::new(
                    e.kind(),
                    format!("{} (fetched twice)", e.message()),
                ));
            }
        }
    }
}

/// Waits for `flight`, passing on its progress in steps.
async fn follow(flight: &Flight, size: u64, on_event: &mut impl FnMut(BlobEvent)) -> Result<()> {
    let mut progress = flight.extra().clone();
    let mut done = std::pin::pin!(flight.done());
    let mut last = 0;
    loop {
        tokio::select! {
            res = &mut done => return res,
            changed = progress.changed() => {
                if changed.is_err() {
                    return done.await;
                }
                let n = *progress.borrow_and_update();
                if n >= last + PROGRESS_STEP || n == size {
                    last = n;
                    on_event(BlobEvent::Progress(n));
                }
            }
        }
    }
}
