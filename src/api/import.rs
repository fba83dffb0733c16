//! bosun.v1 Images.Import and ImportStream: the request's naming, and a client's stream of chunks read as the archive.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use tokio::sync::mpsc;
use tonic::Streaming;

use crate::error::{Error, Result};
use crate::image::import::{self, CtrNaming, Imported, Naming};
use crate::image::service::Images;
use crate::proto::bosun::v1 as pb;

/// Chunks in flight between the gRPC stream and the archive reader: the client is held back
/// (HTTP/2 flow control) rather than the archive buffered.
const CHUNKS_IN_FLIGHT: usize = 4;

/// How `req` names the images.
pub(super) fn naming(req: &pb::ImportRequest) -> Naming {
    match &req.ctr {
        Some(c) => Naming::Ctr(CtrNaming {
            prefix: c.prefix.clone(),
            filter: c.filter,
            digests: c.digests,
            skip_digest_for_named: c.skip_digest_for_named,
            index_name: Some(c.index_name.clone()).filter(|s| !s.is_empty()),
        }),
        None => Naming::Bosun {
            base_name: Some(req.base_name.clone()).filter(|s| !s.is_empty()),
            tags: req.tags.clone(),
        },
    }
}

/// Imports the archive at `req.path`, which the daemon reads.
pub(super) async fn from_path(
    images: &Arc<Images>,
    req: pb::ImportRequest,
) -> Result<Vec<Imported>> {
    let path = Path::new(&req.path);
    if !path.is_absolute() {
        return Err(Error::invalid(format!(
            "import path {:?}: must be absolute",
            req.path
        )));
    }
    import::import_file(images, path, naming(&req))
        .await
        .map_err(|e| e.context(format!("import {}", path.display())))
}

/// Imports the archive a client streams: the first message's request says how to name it.
pub(super) async fn from_stream(
    images: &Arc<Images>,
    mut stream: Streaming<pb::ImportChunk>,
) -> Result<Vec<Imported>> {
    let first = stream
        .message()
        .await
        .map_err(|s| Error::invalid(format!("import stream: {}", s.message())))?
        .ok_or_else(|| Error::invalid("import stream: no message"))?;
    let req = first
        .request
        .ok_or_else(|| Error::invalid("import stream: the first message carries no request"))?;
    if !req.path.is_empty() {
        return Err(Error::invalid(
            "import stream: the request names a path (use Import for files the daemon reads)",
        ));
    }
    let (tx, rx) = mpsc::channel(CHUNKS_IN_FLIGHT);
    let forward = async move {
        if !first.data.is_empty() && tx.send(Ok(first.data)).await.is_err() {
            return;
        }
        loop {
            let next = match stream.message().await {
                Ok(Some(chunk)) if chunk.data.is_empty() => continue,
                Ok(Some(chunk)) => Ok(chunk.data),
                Ok(None) => return,
                Err(s) => Err(format!("the client's stream broke: {}", s.message())),
            };
            let broke = next.is_err();
            // A reader that stopped (a bad archive) drops its end: nothing more to forward.
            if tx.send(next).await.is_err() || broke {
                return;
            }
        }
    };
    let reader = ChunkReader {
        rx,
        chunk: Vec::new(),
        at: 0,
    };
    let import = import::import(images, reader, "the streamed archive".into(), naming(&req));
    tokio::pin!(import, forward);
    let mut forwarding = true;
    loop {
        // The import's end decides: a bad archive is answered at once, not after the client
        // sent the rest of it.
        tokio::select! {
            imported = &mut import => return imported,
            () = &mut forward, if forwarding => forwarding = false,
        }
    }
}

/// The archive's bytes as they arrive, for the blocking archive reader.
struct ChunkReader {
    rx: mpsc::Receiver<std::result::Result<Vec<u8>, String>>,
    chunk: Vec<u8>,
    at: usize,
}

impl Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.chunk.len() {
            match self.rx.blocking_recv() {
                None => return Ok(0),
                Some(Ok(chunk)) => (self.chunk, self.at) = (chunk, 0),
                Some(Err(why)) => return Err(std::io::Error::other(why)),
            }
        }
        let n = buf.len().min(self.chunk.len() - self.at);
        buf[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_read_as_one_stream_and_a_broken_one_is_an_error() {
        let (tx, rx) = mpsc::channel(4);
        tx.try_send(Ok(b"ab".to_vec())).expect("send");
        tx.try_send(Ok(b"cde".to_vec())).expect("send");
        drop(tx);
        let mut r = ChunkReader {
            rx,
            chunk: Vec::new(),
            at: 0,
        };
        let mut all = String::new();
        r.read_to_string(&mut all).expect("read");
        assert_eq!(all, "abcde");
        let (tx, rx) = mpsc::channel(4);
        tx.try_send(Ok(b"ab".to_vec())).expect("send");
        tx.try_send(Err("gone".into())).expect("send");
        let mut r = ChunkReader {
            rx,
            chunk: Vec::new(),
            at: 0,
        };
        let e = r.read_to_end(&mut Vec::new()).expect_err("broken");
        assert!(e.to_string().contains("gone"), "{e}");
    }

    #[test]
    fn the_request_picks_bosun_or_ctr_naming() {
        let bosun = naming(&pb::ImportRequest {
            base_name: "docker.io/library/x".into(),
            ..Default::default()
        });
        assert!(matches!(
            bosun,
            Naming::Bosun {
                base_name: Some(_),
                ..
            }
        ));
        let ctr = naming(&pb::ImportRequest {
            ctr: Some(pb::CtrNaming {
                prefix: "import-2024-01-02".into(),
                digests: true,
                ..Default::default()
            }),
            ..Default::default()
        });
        match ctr {
            Naming::Ctr(c) => assert!(c.digests && c.index_name.is_none() && !c.filter),
            other => panic!("{other:?}"),
        }
    }
}
