//! `bosun image ls|inspect|rm|pull|import`: image commands over the daemon's socket.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Subcommand;

use crate::cli::client::connect;
use crate::proto::bosun::v1 as api;
use crate::proto::runtime::v1 as pb;

/// Image subcommands.
#[derive(Debug, Subcommand)]
pub enum ImageCommand {
    /// List images.
    #[command(alias = "list")]
    Ls {
        /// Only print image ids.
        #[arg(short, long)]
        quiet: bool,
    },
    /// Show an image's status and config as JSON.
    Inspect {
        /// Image reference or id.
        image: String,
    },
    /// Remove images (every tag of each).
    #[command(alias = "remove")]
    Rm {
        /// Image references or ids.
        #[arg(required = true)]
        images: Vec<String>,
    },
    /// Pull an image from a registry.
    Pull {
        /// Image reference.
        image: String,
        /// Registry credentials as USER:PASSWORD.
        #[arg(long)]
        creds: Option<String>,
        /// No progress display.
        #[arg(short, long)]
        quiet: bool,
    },
    /// Import an OCI layout tar or docker-archive tar (`docker save`), gzip allowed.
    Import {
        /// Archive file.
        file: PathBuf,
        /// Repository for bare OCI ref names, e.g. docker.io/library/busybox.
        #[arg(long)]
        base_name: Option<String>,
        /// Extra full references to tag the imported image(s) with.
        #[arg(long = "tag")]
        tags: Vec<String>,
    },
}

/// `--creds USER:PASSWORD` taken apart (empty when not given).
fn credentials_of(creds: Option<&str>) -> anyhow::Result<(String, String)> {
    match creds.map(|c| c.split_once(':')) {
        None => Ok((String::new(), String::new())),
        Some(Some((u, p))) => Ok((u.to_string(), p.to_string())),
        Some(None) => bail!("--creds must be USER:PASSWORD (e.g. --creds alice:s3cret)"),
    }
}

/// The error for an image the daemon does not have, with what to do next.
fn not_found(image: &str) -> String {
    format!(
        "image {image:?} not found (bosun image ls lists images; bosun image pull {image} \
         fetches it)"
    )
}

fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1000.0 && u < UNITS.len() - 1 {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes}B")
    } else {
        format!("{v:.3}{}", UNITS[u]).replace(".000", "")
    }
}

/// Splits `name:tag` (the tag after the last colon not part of a host:port).
fn split_tag(t: &str) -> (&str, &str) {
    match t.rfind(':') {
        Some(i) if !t[i..].contains('/') => (&t[..i], &t[i + 1..]),
        _ => (t, "<none>"),
    }
}

/// Runs an image subcommand against the daemon at `socket`.
pub async fn run(socket: PathBuf, cmd: ImageCommand) -> anyhow::Result<()> {
    // What needs no daemon is checked first: a missing archive or bad --creds is said as such.
    let mut archive = None;
    let mut credentials = None;
    match &cmd {
        ImageCommand::Import { file, .. } => {
            archive = Some(std::fs::canonicalize(file).map_err(|e| {
                anyhow::anyhow!(
                    "archive {}: {e} (bosun image import takes an OCI layout or docker-archive \
                     tar file)",
                    file.display()
                )
            })?);
        }
        ImageCommand::Pull { creds, .. } => credentials = Some(credentials_of(creds.as_deref())?),
        _ => {}
    }
    let channel = connect(&socket).await?;
    let mut cri = pb::image_service_client::ImageServiceClient::new(channel.clone());
    match cmd {
        ImageCommand::Ls { quiet } => {
            let mut images = cri
                .list_images(pb::ListImagesRequest::default())
                .await?
                .into_inner()
                .images;
            images.sort_by(|a, b| a.repo_tags.cmp(&b.repo_tags));
            let mut out = std::io::stdout().lock();
            if !quiet {
                writeln!(
                    out,
                    "{:<50} {:<12} {:<14} {:>10}",
                    "IMAGE", "TAG", "IMAGE ID", "SIZE"
                )?;
            }
            for img in images {
                let id = img.id.trim_start_matches("sha256:");
                if quiet {
                    writeln!(out, "{}", img.id)?;
                    continue;
                }
                let short = &id[..id.len().min(13)];
                if img.repo_tags.is_empty() {
                    writeln!(
                        out,
                        "{:<50} {:<12} {:<14} {:>10}",
                        "<none>",
                        "<none>",
                        short,
                        human(img.size)
                    )?;
                }
                for t in &img.repo_tags {
                    let (name, tag) = split_tag(t);
                    writeln!(
                        out,
                        "{name:<50} {tag:<12} {short:<14} {:>10}",
                        human(img.size)
                    )?;
                }
            }
        }
        ImageCommand::Inspect { image } => {
            let r = cri
                .image_status(pb::ImageStatusRequest {
                    image: Some(pb::ImageSpec {
                        image: image.clone(),
                        ..Default::default()
                    }),
                    verbose: true,
                })
                .await?
                .into_inner();
            let Some(img) = r.image else {
                bail!("{}", not_found(&image))
            };
            let info: serde_json::Value = r
                .info
                .get("info")
                .and_then(|s| serde_json::from_str(s).ok())
                .unwrap_or_default();
            let v = serde_json::json!({
                "id": img.id, "repoTags": img.repo_tags, "repoDigests": img.repo_digests,
                "size": img.size, "uid": img.uid.map(|u| u.value), "username": img.username,
                "info": info,
            });
            writeln!(std::io::stdout(), "{}", serde_json::to_string_pretty(&v)?)?;
        }
        ImageCommand::Rm { images } => {
            for image in images {
                let st = cri
                    .image_status(pb::ImageStatusRequest {
                        image: Some(pb::ImageSpec {
                            image: image.clone(),
                            ..Default::default()
                        }),
                        verbose: false,
                    })
                    .await?
                    .into_inner();
                let Some(img) = st.image else {
                    bail!("{}", not_found(&image))
                };
                cri.remove_image(pb::RemoveImageRequest {
                    image: Some(pb::ImageSpec {
                        image: img.id.clone(),
                        ..Default::default()
                    }),
                })
                .await
                .with_context(|| format!("remove {image}"))?;
                writeln!(
                    std::io::stdout(),
                    "Deleted: {}",
                    img.repo_tags.first().unwrap_or(&img.id)
                )?;
            }
        }
        ImageCommand::Pull {
            image,
            creds,
            quiet,
        } => {
            let _ = creds; // taken apart above, before dialling the daemon
            let (username, password) = credentials.take().unwrap_or_default();
            let mut api = api::images_client::ImagesClient::new(channel);
            let mut stream = api
                .pull(api::PullRequest {
                    image: image.clone(),
                    username,
                    password,
                    ..Default::default()
                })
                .await?
                .into_inner();
            let mut last_line = std::time::Instant::now();
            while let Some(p) = stream.message().await? {
                if let Some(img) = p.image {
                    if !quiet {
                        eprintln!();
                    }
                    writeln!(std::io::stdout(), "Image is up to date for {}", img.id)?;
                    break;
                }
                if quiet {
                    continue;
                }
                let short = p
                    .digest
                    .trim_start_matches("sha256:")
                    .chars()
                    .take(12)
                    .collect::<String>();
                if p.status == "downloading" {
                    if last_line.elapsed().as_millis() < 100 && p.done < p.total {
                        continue;
                    }
                    last_line = std::time::Instant::now();
                    eprint!(
                        "\r{short}: downloading {} / {}      ",
                        human(p.done),
                        human(p.total)
                    );
                } else {
                    eprint!("\r{short}: {}                              \n", p.status);
                }
            }
        }
        ImageCommand::Import {
            file,
            base_name,
            tags,
        } => {
            let path = archive.take().unwrap_or(file); // made absolute above
            let mut api = api::images_client::ImagesClient::new(channel);
            let r = api
                .import(api::ImportRequest {
                    path: path.display().to_string(),
                    tags,
                    base_name: base_name.unwrap_or_default(),
                    ctr: None,
                })
                .await?
                .into_inner();
            for img in r.images {
                let names = if img.repo_tags.is_empty() {
                    "<untagged>".to_string()
                } else {
                    img.repo_tags.join(", ")
                };
                writeln!(std::io::stdout(), "imported {} {names}", img.id)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_split_keeps_registry_port() {
        assert_eq!(
            split_tag("127.0.0.1:5000/a/b:v1"),
            ("127.0.0.1:5000/a/b", "v1")
        );
        assert_eq!(
            split_tag("docker.io/library/busybox:latest"),
            ("docker.io/library/busybox", "latest")
        );
        assert_eq!(human(48_000_000), "48MB");
    }
}
