//! bosun.v1.Images: archive import, pulls that stream progress to the CLI, and the name-level operations of `ctr images` (list, tag, remove a name).

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::mpsc;
use tonic::{Request, Response, Status, Streaming};

use super::import;
use crate::cri::errors::{reply, to_status};
use crate::error::Error;
use crate::image::import::Imported;
use crate::image::index::ImageRecord;
use crate::image::pull::PullEvent;
use crate::image::reference::Reference;
use crate::image::registry::{Credentials, PullHosts};
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

impl ApiImages {
    /// The wire form of `r`; `new_names`: the names this request gave it.
    fn imported(&self, r: &ImageRecord, new_names: Vec<String>) -> pb::ImportedImage {
        let (target, media_type) = self.images.target(r);
        pb::ImportedImage {
            id: r.id.to_string(),
            repo_tags: r.repo_tags.clone(),
            repo_digests: r.repo_digests.clone(),
            size: r.size,
            target_digest: target.to_string(),
            target_media_type: media_type,
            platform: format!("{}/{}", r.config.os, r.config.architecture),
            new_names,
            chain_id: r
                .layers
                .last()
                .map(|l| l.chain_id.to_string())
                .unwrap_or_default(),
        }
    }

    fn import_response(&self, imported: Vec<Imported>) -> pb::ImportResponse {
        pb::ImportResponse {
            images: imported
                .into_iter()
                .map(|i| self.imported(&i.record, i.names))
                .collect(),
        }
    }
}

/// A pull's registry settings from the request (empty paths: unset).
fn pull_hosts(h: Option<pb::PullHosts>) -> PullHosts {
    let h = h.unwrap_or_default();
    let path = |s: String| Some(PathBuf::from(s)).filter(|p| !p.as_os_str().is_empty());
    PullHosts {
        plain_http: h.plain_http,
        skip_verify: h.skip_verify,
        hosts_dir: path(h.hosts_dir),
        ca_file: path(h.ca_file),
        client_cert: path(h.client_cert).map(|c| (c, path(h.client_key))),
    }
}

/// An image reference from a request field; the error names the field.
fn reference(field: &str, s: &str) -> crate::Result<Reference> {
    Reference::parse(s).map_err(|e| e.context(field))
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
        let r = import::from_path(&self.images, req.into_inner()).await;
        reply("Import", r.map(|i| self.import_response(i)))
    }

    async fn import_stream(
        &self,
        req: Request<Streaming<pb::ImportChunk>>,
    ) -> Result<Response<pb::ImportResponse>, Status> {
        let r = import::from_stream(&self.images, req.into_inner()).await;
        reply("ImportStream", r.map(|i| self.import_response(i)))
    }

    async fn list(
        &self,
        _req: Request<pb::ListImagesRequest>,
    ) -> Result<Response<pb::ListImagesResponse>, Status> {
        let images = self
            .images
            .list()
            .iter()
            .map(|r| self.imported(r, Vec::new()))
            .collect();
        reply("List", Ok(pb::ListImagesResponse { images }))
    }

    async fn tag(
        &self,
        req: Request<pb::TagRequest>,
    ) -> Result<Response<pb::ImportedImage>, Status> {
        let req = req.into_inner();
        let r = (|| {
            let targets = req
                .targets
                .iter()
                .map(|t| reference("targets", t))
                .collect::<crate::Result<Vec<_>>>()?;
            if targets.is_empty() {
                return Err(Error::invalid("targets: no name given"));
            }
            let (rec, given) = self.images.tag(&req.source, &targets, req.force)?;
            Ok(self.imported(&rec, given))
        })();
        reply("Tag", r)
    }

    async fn untag(
        &self,
        req: Request<pb::UntagRequest>,
    ) -> Result<Response<pb::UntagResponse>, Status> {
        let req = req.into_inner();
        let r = reference("name", &req.name)
            .and_then(|name| self.images.untag(&name))
            .map(|gone| pb::UntagResponse {
                found: gone.is_some(),
                image_removed: gone == Some(true),
            });
        reply("Untag", r)
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
            identity_token: req.identity_token,
            ..Default::default()
        };
        let hosts = req.hosts.map(Some).map(pull_hosts);
        let this = ApiImages::new(images.clone());
        tokio::spawn(async move {
            let pull = async {
                match hosts {
                    Some(h) => {
                        images
                            .pull_with_hosts(&req.image, creds, Some(ev_tx), h)
                            .await
                    }
                    None => images.pull(&req.image, creds, Some(ev_tx)).await,
                }
            };
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
                    image: Some(this.imported(&rec, vec![req.image.clone()])),
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
