//! bosun.v1.Images: archive import and pulls that stream progress to the CLI.

use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

use crate::cri::errors::{reply, to_status};
use crate::error::Error;
use crate::image::import::{import, ImportOptions};
use crate::image::index::ImageRecord;
use crate::image::pull::PullEvent;
use crate::image::registry::Credentials;
use crate::image::service::Images;
use crate::proto::bosun::v1 as pb;
use pb::images_server::Images as ImagesApi;

/// The bosun.v1.Images service.
pub struct ApiImages {
    images: Arc<Images>,
}

impl ApiImages {
    /// Serves `images`.
    pub fn new(images: Arc<Images>) -> Self {
        ApiImages { images }
    }
}

fn imported(r: &ImageRecord) -> pb::ImportedImage {
    pb::ImportedImage {
        id: r.id.to_string(),
        repo_tags: r.repo_tags.clone(),
        repo_digests: r.repo_digests.clone(),
        size: r.size,
    }
}

fn progress(ev: PullEvent) -> pb::PullProgress {
    match ev {
        PullEvent::Resolved { digest, .. } => pb::PullProgress {
            digest: digest.to_string(),
            status: "resolved".into(),
            ..Default::default()
        },
        PullEvent::Progress {
            digest,
            done,
            total,
        } => pb::PullProgress {
            digest: digest.to_string(),
            done,
            total,
            status: "downloading".into(),
            ..Default::default()
        },
        PullEvent::Cached { digest } => pb::PullProgress {
            digest: digest.to_string(),
            status: "cached".into(),
            ..Default::default()
        },
        PullEvent::Done { digest } => pb::PullProgress {
            digest: digest.to_string(),
            status: "unpacked".into(),
            ..Default::default()
        },
    }
}

type PullStream = Pin<Box<dyn futures::Stream<Item = Result<pb::PullProgress, Status>> + Send>>;

#[tonic::async_trait]
impl ImagesApi for ApiImages {
    async fn import(
        &self,
        req: Request<pb::ImportRequest>,
    ) -> Result<Response<pb::ImportResponse>, Status> {
        let req = req.into_inner();
        let r = async {
            let path = Path::new(&req.path);
            if !path.is_absolute() {
                return Err(Error::invalid(format!(
                    "import path {:?}: must be absolute",
                    req.path
                )));
            }
            let opts = ImportOptions {
                base_name: Some(req.base_name).filter(|s| !s.is_empty()),
                tags: req.tags,
            };
            let recs = import(&self.images, path, opts)
                .await
                .map_err(|e| e.context(format!("import {}", path.display())))?;
            Ok(pb::ImportResponse {
                images: recs.iter().map(|r| imported(r)).collect(),
            })
        };
        reply("Import", r.await)
    }

    type PullStream = PullStream;

    async fn pull(&self, req: Request<pb::PullRequest>) -> Result<Response<PullStream>, Status> {
        let req = req.into_inner();
        let (ev_tx, mut ev_rx) = mpsc::unbounded_channel();
        let (tx, rx) = mpsc::channel::<Result<pb::PullProgress, Status>>(64);
        let images = self.images.clone();
        let creds = Credentials {
            username: req.username,
            password: req.password,
            ..Default::default()
        };
        tokio::spawn(async move {
            let pull = images.pull(&req.image, creds, Some(ev_tx));
            tokio::pin!(pull);
            let result = loop {
                tokio::select! {
                    r = &mut pull => break r,
                    Some(ev) = ev_rx.recv() => { let _ = tx.send(Ok(progress(ev))).await; }
                }
            };
            while let Ok(ev) = ev_rx.try_recv() {
                let _ = tx.send(Ok(progress(ev))).await;
            }
            let last = match result {
                Ok(rec) => Ok(pb::PullProgress {
                    status: "done".into(),
                    image: Some(imported(&rec)),
                    ..Default::default()
                }),
                Err(e) => Err(to_status("Pull", e)),
            };
            let _ = tx.send(last).await;
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }
}
