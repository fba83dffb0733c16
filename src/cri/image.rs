//! CRI ImageService: ListImages, StreamImages, ImageStatus, PullImage, RemoveImage, ImageFsInfo.

use std::collections::HashMap;
use std::sync::Arc;

use tonic::Request;

use crate::cri::rpc::{list, serve, stream, Pages, Reply};
use crate::error::{Error, Result};
use crate::image::index::ImageRecord;
use crate::image::registry::Credentials;
use crate::image::service::Images;
use crate::image::usage::FsUsage;
use crate::proto::runtime::v1 as pb;
use pb::image_service_server::ImageService;

/// The CRI ImageService over the image domain.
pub struct CriImages {
    images: Arc<Images>,
}

impl CriImages {
    /// Serves `images`.
    pub fn new(images: Arc<Images>) -> Self {
        CriImages { images }
    }
}

/// Splits an image USER into the CRI's numeric uid or user name (as containerd does: empty → neither).
fn user_of(user: Option<&str>) -> (Option<pb::Int64Value>, String) {
    let user = user.unwrap_or_default();
    let name = user.split(':').next().unwrap_or_default();
    if name.is_empty() {
        return (None, String::new());
    }
    match name.parse::<i64>() {
        Ok(uid) => (Some(pb::Int64Value { value: uid }), String::new()),
        Err(_) => (None, name.to_string()),
    }
}

/// The proto form of a stored image.
pub fn image_to_proto(r: &ImageRecord) -> pb::Image {
    let (uid, username) = user_of(r.config.config.user.as_deref());
    pb::Image {
        id: r.id.to_string(),
        repo_tags: r.repo_tags.clone(),
        repo_digests: r.repo_digests.clone(),
        size: r.size,
        uid,
        username,
        spec: Some(pb::ImageSpec {
            image: r.id.to_string(),
            ..Default::default()
        }),
        pinned: false,
    }
}

fn image_key(spec: Option<&pb::ImageSpec>) -> Result<&str> {
    match spec.map(|s| s.image.trim()) {
        Some(s) if !s.is_empty() => Ok(s),
        _ => Err(Error::invalid("image spec: image is required")),
    }
}

fn fs_usage(u: FsUsage) -> pb::FilesystemUsage {
    pb::FilesystemUsage {
        timestamp: u.timestamp_ns,
        fs_id: Some(pb::FilesystemIdentifier {
            mountpoint: u.mountpoint.display().to_string(),
        }),
        used_bytes: Some(pb::UInt64Value {
            value: u.used_bytes,
        }),
        inodes_used: Some(pb::UInt64Value {
            value: u.inodes_used,
        }),
    }
}

fn credentials(auth: Option<pb::AuthConfig>) -> Credentials {
    let a = auth.unwrap_or_default();
    Credentials {
        username: a.username,
        password: a.password,
        auth: a.auth,
        identity_token: a.identity_token,
        registry_token: a.registry_token,
    }
}

impl CriImages {
    fn filtered(&self, filter: Option<pb::ImageFilter>) -> Vec<pb::Image> {
        let key = filter
            .and_then(|f| f.image)
            .map(|s| s.image)
            .unwrap_or_default();
        if key.is_empty() {
            self.images
                .list()
                .iter()
                .map(|r| image_to_proto(r))
                .collect()
        } else {
            self.images
                .lookup(&key)
                .iter()
                .map(|r| image_to_proto(r))
                .collect()
        }
    }

    fn verbose_info(r: &ImageRecord) -> HashMap<String, String> {
        let info = serde_json::json!({
            "id": r.id,
            "manifestDigest": r.manifest_digest,
            "indexDigest": r.index_digest,
            "chainIDs": r.chain_ids().collect::<Vec<_>>(),
            "imageSpec": r.config,
        });
        HashMap::from([("info".to_string(), info.to_string())])
    }
}

#[tonic::async_trait]
impl ImageService for CriImages {
    async fn list_images(
        &self,
        req: Request<pb::ListImagesRequest>,
    ) -> Reply<pb::ListImagesResponse> {
        let filter = req.into_inner().filter;
        list("ListImages", async { Ok(self.filtered(filter)) }).await
    }

    type StreamImagesStream = Pages<pb::StreamImagesResponse>;

    async fn stream_images(
        &self,
        req: Request<pb::StreamImagesRequest>,
    ) -> Reply<Self::StreamImagesStream> {
        let filter = req.into_inner().filter;
        stream("StreamImages", async { Ok(self.filtered(filter)) }).await
    }

    async fn image_status(
        &self,
        req: Request<pb::ImageStatusRequest>,
    ) -> Reply<pb::ImageStatusResponse> {
        let req = req.into_inner();
        let r = async {
            let key = image_key(req.image.as_ref())?;
            // CRI: an absent image is an empty response, not an error.
            Ok(match self.images.lookup(key) {
                Some(r) => pb::ImageStatusResponse {
                    image: Some(image_to_proto(&r)),
                    info: if req.verbose {
                        Self::verbose_info(&r)
                    } else {
                        HashMap::new()
                    },
                },
                None => pb::ImageStatusResponse::default(),
            })
        };
        serve("ImageStatus", r).await
    }

    async fn pull_image(&self, req: Request<pb::PullImageRequest>) -> Reply<pb::PullImageResponse> {
        let req = req.into_inner();
        let r = async {
            let key = image_key(req.image.as_ref())?;
            let rec = self.images.pull(key, credentials(req.auth), None).await?;
            Ok(pb::PullImageResponse {
                image_ref: rec.id.to_string(),
            })
        };
        serve("PullImage", r).await
    }

    async fn remove_image(
        &self,
        req: Request<pb::RemoveImageRequest>,
    ) -> Reply<pb::RemoveImageResponse> {
        let req = req.into_inner();
        let r = async {
            self.images.remove(image_key(req.image.as_ref())?).await?;
            Ok(pb::RemoveImageResponse {})
        };
        serve("RemoveImage", r).await
    }

    async fn image_fs_info(
        &self,
        _req: Request<pb::ImageFsInfoRequest>,
    ) -> Reply<pb::ImageFsInfoResponse> {
        let r = async {
            Ok(pb::ImageFsInfoResponse {
                image_filesystems: vec![fs_usage(self.images.image_fs_usage())],
                // Same mountpoint as the image filesystem: the kubelet sees one disk, not split.
                container_filesystems: vec![fs_usage(self.images.container_fs_usage().await?)],
            })
        };
        serve("ImageFsInfo", r).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_splits_into_uid_or_name() {
        assert_eq!(
            user_of(Some("1000:1000")),
            (Some(pb::Int64Value { value: 1000 }), String::new())
        );
        assert_eq!(user_of(Some("app")), (None, "app".to_string()));
        assert_eq!(user_of(Some("app:audio")), (None, "app".to_string()));
        assert_eq!(user_of(None), (None, String::new()));
        assert_eq!(user_of(Some("")), (None, String::new()));
    }
}
