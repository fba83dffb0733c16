//! `ctr images import|ls|rm|tag|pull` and `ctr version` over bosun's socket, printing what containerd's ctr prints.

use std::io::{Read, Write};
use std::time::Instant;

use anyhow::{bail, Context};
use tokio::sync::mpsc;
use tonic::transport::Channel;

use super::args::{Import, Pull};
use crate::image::import::naming::dated_prefix;
use crate::proto::bosun::v1 as api;
use crate::proto::runtime::v1 as pb;

/// Bytes of the archive per message.
const CHUNK: usize = 1 << 20;

fn images_api(channel: &Channel) -> api::images_client::ImagesClient<Channel> {
    api::images_client::ImagesClient::new(channel.clone()).max_decoding_message_size(64 << 20)
}

/// `ctr images import`: the archive (a file or stdin) streamed to the daemon, one message at
/// a time; then `unpacking <name> (<digest>)...done` for every name given.
pub async fn import(channel: &Channel, args: Import) -> anyhow::Result<()> {
    let input: Box<dyn Read + Send> = if args.input == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(std::fs::File::open(&args.input).with_context(|| format!("open {}", args.input))?)
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default();
    let naming = api::CtrNaming {
        prefix: args.base_name.clone().unwrap_or_else(|| dated_prefix(now)),
        filter: args.base_name.is_some(),
        digests: args.digests,
        skip_digest_for_named: args.skip_digest_for_named,
        index_name: args.index_name.clone().unwrap_or_default(),
    };
    let request = api::ImportRequest {
        ctr: Some(naming),
        ..Default::default()
    };
    let (tx, rx) = mpsc::channel::<api::ImportChunk>(2);
    // Read on a thread of its own: stdin may block for as long as its writer likes.
    let reader = std::thread::spawn(move || read_chunks(input, request, tx));
    let sent = images_api(channel)
        .import_stream(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await;
    let joined = |reader: std::thread::JoinHandle<anyhow::Result<()>>| {
        reader
            .join()
            .map_err(|_| anyhow::anyhow!("the archive reader panicked"))?
    };
    let r = match sent {
        Ok(r) => {
            joined(reader)?;
            r.into_inner()
        }
        // A failed read is the story when the daemon only saw the archive end early; a
        // reader still blocked on stdin is not waited for.
        Err(s) if reader.is_finished() => {
            joined(reader)?;
            return Err(s.into());
        }
        Err(s) => return Err(s.into()),
    };
    let mut out = std::io::stdout().lock();
    for img in r.images {
        for name in &img.new_names {
            writeln!(out, "unpacking {name} ({})...done", img.target_digest)?;
        }
    }
    Ok(())
}

/// Sends `request`, then `input` in chunks; stops early when the daemon stopped listening.
fn read_chunks(
    mut input: Box<dyn Read + Send>,
    request: api::ImportRequest,
    tx: mpsc::Sender<api::ImportChunk>,
) -> anyhow::Result<()> {
    let mut first = Some(request);
    loop {
        let mut data = vec![0u8; CHUNK];
        let mut filled = 0;
        while filled < CHUNK {
            match input.read(&mut data[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("read the archive"),
            }
        }
        data.truncate(filled);
        let end = filled < CHUNK;
        let chunk = api::ImportChunk {
            request: first.take(),
            data,
        };
        if tx.blocking_send(chunk).is_err() || end {
            return Ok(());
        }
    }
}

/// `ctr images ls [-q]`: every name of every image (tags, then digest names).
pub async fn list(channel: &Channel, quiet: bool, names: &[String]) -> anyhow::Result<()> {
    let images = images_api(channel)
        .list(api::ListImagesRequest {})
        .await?
        .into_inner()
        .images;
    let wanted = |n: &str| {
        names.is_empty()
            || names.iter().any(|w| {
                w == n
                    || crate::image::reference::Reference::parse(w)
                        .is_ok_and(|r| r.to_string() == n)
            })
    };
    let mut rows: Vec<[String; 6]> = Vec::new();
    for img in &images {
        for name in img.repo_tags.iter().chain(&img.repo_digests) {
            if !wanted(name) {
                continue;
            }
            rows.push([
                name.clone(),
                img.target_media_type.clone(),
                img.target_digest.clone(),
                size(img.size),
                img.platform.clone(),
                "-".into(),
            ]);
        }
    }
    rows.sort();
    let mut out = std::io::stdout().lock();
    if quiet {
        for r in rows {
            writeln!(out, "{}", r[0])?;
        }
        return Ok(());
    }
    let header = ["REF", "TYPE", "DIGEST", "SIZE", "PLATFORMS", "LABELS"].map(String::from);
    write!(out, "{}", table(std::iter::once(header).chain(rows)))?;
    Ok(())
}

/// Rows as Go's tabwriter lays out `a\tb\t…\t\n` lines with padding 1: every cell, the last
/// one too, padded to its column's widest plus one space.
fn table(rows: impl IntoIterator<Item = [String; 6]>) -> String {
    let rows: Vec<[String; 6]> = rows.into_iter().collect();
    let mut widths = [0usize; 6];
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut s = String::new();
    for r in &rows {
        for (w, c) in widths.iter().zip(r) {
            s.push_str(&format!("{c:<width$}", width = w + 1));
        }
        s.push('\n');
    }
    s
}

/// containerd's size format: `%.1f` in 1024 steps (`2.1 MiB`, `728.0 B`).
fn size(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// `ctr images rm <ref>...`: each name removed and printed; a name no image has is a warning
/// (containerd's exit status stays 0 for it); other failures make the exit status 1.
pub async fn remove(channel: &Channel, refs: &[String]) -> anyhow::Result<()> {
    let mut api = images_api(channel);
    let mut first_error = None;
    for r in refs {
        match api.untag(api::UntagRequest { name: r.clone() }).await {
            Ok(res) if res.get_ref().found => println!("{r}"),
            Ok(_) => eprintln!("ctr: warning: {r}: image not found"),
            Err(s) => {
                eprintln!("ctr: unable to delete {r}: {}", s.message());
                first_error.get_or_insert_with(|| format!("unable to delete {r}: {}", s.message()));
            }
        }
    }
    match first_error {
        Some(e) => bail!(e),
        None => Ok(()),
    }
}

/// `ctr images tag <source> <target>...`: prints each new name.
pub async fn tag(
    channel: &Channel,
    source: String,
    targets: Vec<String>,
    force: bool,
) -> anyhow::Result<()> {
    images_api(channel)
        .tag(api::TagRequest {
            source,
            targets: targets.clone(),
            force,
        })
        .await?;
    for t in targets {
        println!("{t}");
    }
    Ok(())
}

/// `ctr images pull`: progress lines, then `unpacking <platform> <digest>...` and `done`.
pub async fn pull(channel: &Channel, args: Pull) -> anyhow::Result<()> {
    let start = Instant::now();
    let (username, password) = match args.user.as_deref() {
        None => (String::new(), String::new()),
        Some(u) => match u.split_once(':') {
            Some((u, p)) => (u.to_string(), p.to_string()),
            None => (u.to_string(), super::password::prompt()?),
        },
    };
    let hosts = api::PullHosts {
        plain_http: args.plain_http,
        skip_verify: args.skip_verify,
        hosts_dir: absolute(args.hosts_dir)?,
        ca_file: absolute(args.tls_ca)?,
        client_cert: absolute(args.tls_cert)?,
        client_key: absolute(args.tls_key)?,
    };
    let req = api::PullRequest {
        image: args.reference.clone(),
        username,
        password,
        identity_token: args.refresh.unwrap_or_default(),
        // Without flags, the pull is the daemon's own: shared with a kubelet's of the same image.
        hosts: (hosts != api::PullHosts::default()).then_some(hosts),
    };
    let mut stream = images_api(channel).pull(req).await?.into_inner();
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}: resolving", args.reference)?;
    while let Some(p) = stream.message().await? {
        if let Some(img) = p.image {
            writeln!(out, "unpacking {} {}...", img.platform, img.target_digest)?;
            if args.print_chainid {
                writeln!(out, "image chain ID: {}", img.chain_id)?;
            }
            writeln!(out, "done: {:.3}s", start.elapsed().as_secs_f64())?;
            break;
        }
        match p.status.as_str() {
            "resolved" => writeln!(out, "{}: resolved to {}", args.reference, p.digest)?,
            "cached" => writeln!(out, "layer-{}: exists", p.digest)?,
            "unpacked" => writeln!(out, "layer-{}: done", p.digest)?,
            _ => {}
        }
    }
    Ok(())
}

/// Paths the daemon reads are made absolute here: its working directory is not this one.
fn absolute(p: Option<String>) -> anyhow::Result<String> {
    Ok(match p {
        None => String::new(),
        Some(p) => std::path::absolute(&p)
            .with_context(|| format!("path {p}"))?
            .display()
            .to_string(),
    })
}

/// `ctr version`: this binary's version, then the daemon's.
pub async fn version(channel: &Channel) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "Client:")?;
    writeln!(out, "  Version:  {}", crate::version::VERSION)?;
    writeln!(out, "  Revision: {}", crate::version::COMMIT)?;
    writeln!(out, "  Runtime:  bosun")?;
    writeln!(out)?;
    let v = pb::runtime_service_client::RuntimeServiceClient::new(channel.clone())
        .version(pb::VersionRequest {
            version: String::new(),
        })
        .await?
        .into_inner();
    let (version, revision) = match v.runtime_version.split_once(" (commit ") {
        Some((v, rest)) => (v.to_string(), rest.trim_end_matches(')').to_string()),
        None => (v.runtime_version.clone(), String::new()),
    };
    writeln!(out, "Server:")?;
    writeln!(out, "  Version:  {version}")?;
    writeln!(out, "  Revision: {revision}")?;
    writeln!(
        out,
        "  Runtime:  {} (CRI {})",
        v.runtime_name, v.runtime_api_version
    )?;
    if version != crate::version::VERSION {
        eprintln!("WARNING: version mismatch");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_containerd_prints_them() {
        assert_eq!(size(728), "728.0 B");
        assert_eq!(size(2 << 20), "2.0 MiB");
        assert_eq!(size(1_536), "1.5 KiB");
        assert_eq!(size(5 << 30), "5.0 GiB");
    }

    #[test]
    fn the_table_pads_every_cell_like_tabwriter() {
        let t = table([
            ["REF", "TYPE", "DIGEST", "SIZE", "PLATFORMS", "LABELS"].map(String::from),
            [
                "docker.io/library/a:1",
                "t",
                "sha256:x",
                "1.0 KiB",
                "linux/amd64",
                "-",
            ]
            .map(String::from),
        ]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "REF                   TYPE DIGEST   SIZE    PLATFORMS   LABELS "
        );
        assert_eq!(
            lines[1],
            "docker.io/library/a:1 t    sha256:x 1.0 KiB linux/amd64 -      "
        );
    }
}
