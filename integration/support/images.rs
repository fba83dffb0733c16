//! ImageService tests' helpers: their needs, PullImage and ImageStatus calls, a test image's
//! content size, what only a crash could leave in the store, and `bosun image` calls.

use anyhow::bail;
use bosun::proto::runtime::v1 as pb;
use tonic::transport::Channel;

use super::{images_manifest, Daemon, Need};

/// Root, the registry binary and the test images.
pub const ALL: &[Need] = &[Need::Root, Need::Registry, Need::Images];

/// An ImageSpec naming `image`.
pub fn spec(image: &str) -> Option<pb::ImageSpec> {
    Some(pb::ImageSpec {
        image: image.to_string(),
        ..Default::default()
    })
}

/// PullImage of `image`; its image ref, or the gRPC status.
pub async fn pull(
    c: &mut pb::image_service_client::ImageServiceClient<Channel>,
    image: &str,
    auth: Option<pb::AuthConfig>,
) -> Result<String, tonic::Status> {
    c.pull_image(pb::PullImageRequest {
        image: spec(image),
        auth,
        sandbox_config: None,
    })
    .await
    .map(|r| r.into_inner().image_ref)
}

/// ImageStatus of `image` (`None`: not present).
pub async fn status(
    c: &mut pb::image_service_client::ImageServiceClient<Channel>,
    image: &str,
) -> anyhow::Result<Option<pb::Image>> {
    Ok(c.image_status(pb::ImageStatusRequest {
        image: spec(image),
        verbose: false,
    })
    .await?
    .into_inner()
    .image)
}

/// The bytes test image `name`'s manifest, config and layers take.
pub fn content_size(name: &str) -> u64 {
    let m = &images_manifest()[name];
    let layers: u64 = m["layers"]
        .as_array()
        .map(|ls| ls.iter().filter_map(|l| l["size"].as_u64()).sum())
        .unwrap_or(0);
    m["manifest_size"].as_u64().unwrap_or(0) + m["config_size"].as_u64().unwrap_or(0) + layers
}

/// Files in the store that only a crash or a failed write could leave.
pub fn leftovers(d: &Daemon) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(d.root().join("content/ingest")) {
        out.extend(
            rd.flatten()
                .map(|e| format!("ingest/{}", e.file_name().to_string_lossy())),
        );
    }
    if let Ok(rd) = std::fs::read_dir(d.root().join("snapshots")) {
        out.extend(
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with('.'))
                .map(|n| format!("snapshots/{n}")),
        );
    }
    out
}

/// `bosun ARGS` against `d`, which must succeed; its stdout.
pub fn cli_ok(d: &Daemon, args: &[&str]) -> anyhow::Result<String> {
    let out = d.cli(args)?;
    if !out.status.success() {
        bail!(
            "bosun {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
