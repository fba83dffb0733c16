//! SPDY session tests: client and server over an in-memory duplex, and raw-frame peers.

use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::time::timeout;

use super::frame::{self, decode, encode, goaway, rst, Frame, FLAG_FIN};
use super::header::{Deflater, Inflater};
use super::{Connection, Headers, Incoming};

const T: Duration = Duration::from_secs(20);

fn h(pairs: &[(&str, &str)]) -> Headers {
    pairs
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

fn pair() -> (Connection, Incoming, Connection, Incoming) {
    let (a, b) = tokio::io::duplex(64 * 1024);
    let (client, client_in) = Connection::client(a);
    let (server, server_in) = Connection::server(b);
    (client, client_in, server, server_in)
}

/// A hand-driven peer speaking raw frames, to test what a well-behaved session never sends.
struct Raw {
    io: DuplexStream,
    deflater: Deflater,
    inflater: Inflater,
    buf: Vec<u8>,
}

impl Raw {
    fn new(io: DuplexStream) -> Result<Raw> {
        Ok(Raw {
            io,
            deflater: Deflater::new()?,
            inflater: Inflater::default(),
            buf: Vec::new(),
        })
    }

    async fn send(&mut self, f: &Frame) -> Result<()> {
        let mut out = Vec::new();
        encode(f, &mut self.deflater, &mut out)?;
        self.io.write_all(&out).await?;
        Ok(())
    }

    /// The next frame (a WINDOW_UPDATE too: the session must never send one); `None` at EOF.
    async fn recv(&mut self) -> Result<Option<Frame>> {
        loop {
            if let Some((f, used)) = decode(&self.buf, &mut self.inflater)? {
                self.buf.drain(..used);
                match f {
                    None => continue,
                    Some(f) => return Ok(Some(f)),
                }
            }
            let mut chunk = [0u8; 4096];
            let n = timeout(T, self.io.read(&mut chunk)).await??;
            if n == 0 {
                return Ok(None);
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

fn raw_server() -> Result<(Raw, Connection, Incoming)> {
    let (a, b) = tokio::io::duplex(64 * 1024);
    let (server, incoming) = Connection::server(b);
    Ok((Raw::new(a)?, server, incoming))
}

#[tokio::test]
async fn open_carries_headers_and_data_echoes_both_ways() -> Result<()> {
    let (client, _ci, server, mut si) = pair();
    let echo = tokio::spawn(async move {
        let mut s = si.accept().await.ok_or_else(|| anyhow!("no stream"))?;
        assert_eq!(s.id(), 1);
        assert_eq!(s.header("streamtype"), Some("stdin"));
        assert_eq!(s.header("StreamType"), Some("stdin"));
        assert_eq!(s.header("port"), Some("8080"));
        let mut got = Vec::new();
        s.read_to_end(&mut got).await?;
        s.write_all(&got).await?;
        s.shutdown().await?;
        anyhow::Ok((server, si))
    });
    let mut s = timeout(
        T,
        client.open(h(&[("streamType", "stdin"), ("port", "8080")])),
    )
    .await??;
    assert_eq!(
        s.headers(),
        &h(&[("streamType", "stdin"), ("port", "8080")])
    );
    s.write_all(b"hello spdy").await?;
    s.shutdown().await?;
    let mut back = Vec::new();
    timeout(T, s.read_to_end(&mut back)).await??;
    assert_eq!(back, b"hello spdy");
    let _server = echo.await??;
    // A second stream gets the next odd id.
    let open2 = client.open(h(&[("streamtype", "stdout")]));
    let s2 = timeout(Duration::from_millis(300), open2).await;
    assert!(
        s2.is_err(),
        "the server did not accept, so the open waits for SYN_REPLY"
    );
    Ok(())
}

#[tokio::test]
async fn server_opens_streams_too_with_even_ids() -> Result<()> {
    let (_client, mut ci, server, _si) = pair();
    let acceptor = tokio::spawn(async move {
        let mut s = ci.accept().await.ok_or_else(|| anyhow!("no stream"))?;
        let mut buf = String::new();
        s.read_to_string(&mut buf).await?;
        anyhow::Ok((s.id(), buf))
    });
    let mut s = timeout(T, server.open(h(&[("x", "y")]))).await??;
    s.write_all(b"from server").await?;
    s.shutdown().await?;
    let (id, text) = timeout(T, acceptor).await???;
    assert_eq!((id, text.as_str()), (2, "from server"));
    Ok(())
}

#[tokio::test]
async fn half_close_keeps_the_other_direction_open() -> Result<()> {
    let (client, _ci, _server, mut si) = pair();
    let peer = tokio::spawn(async move {
        let mut s = si.accept().await.ok_or_else(|| anyhow!("no stream"))?;
        let mut got = Vec::new();
        s.read_to_end(&mut got).await?; // the client's FIN arrives first
        assert_eq!(got, b"stdin data");
        // Long after the peer's FIN, this side still writes.
        tokio::time::sleep(Duration::from_millis(50)).await;
        s.write_all(b"exit output").await?;
        s.shutdown().await?;
        anyhow::Ok(s)
    });
    let mut s = timeout(T, client.open(h(&[("streamtype", "stdin")]))).await??;
    s.write_all(b"stdin data").await?;
    s.shutdown().await?;
    assert!(
        s.write_all(b"more").await.is_err(),
        "write after shutdown must fail"
    );
    let mut out = Vec::new();
    timeout(T, s.read_to_end(&mut out)).await??;
    assert_eq!(out, b"exit output");
    // EOF is sticky.
    let mut more = [0u8; 8];
    assert_eq!(s.read(&mut more).await?, 0);
    drop(peer.await??);
    Ok(())
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Writes `data` in uneven chunks while reading everything the peer sends; returns the digest
/// of what was read.
async fn pump(mut s: super::Stream, data: Vec<u8>) -> Result<(usize, [u8; 32])> {
    let (mut r, mut w) = tokio::io::split(&mut s);
    let writer = async {
        let mut at = 0;
        let mut step = 1usize;
        while at < data.len() {
            step = (step * 7 + 13) % 100_000 + 1;
            let end = (at + step).min(data.len());
            w.write_all(&data[at..end]).await?;
            at = end;
        }
        w.shutdown().await?;
        anyhow::Ok(())
    };
    let reader = async {
        let mut hasher = Sha256::new();
        let mut total = 0;
        let mut buf = vec![0u8; 50_000];
        loop {
            let n = r.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            total += n;
            hasher.update(&buf[..n]);
        }
        anyhow::Ok((total, hasher.finalize().into()))
    };
    let (wr, rd) = tokio::join!(writer, reader);
    wr?;
    rd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_mib_each_way_on_several_streams_at_once_loses_nothing() -> Result<()> {
    const LEN: usize = 16 * 1024 * 1024;
    const STREAMS: u64 = 3;
    let (client, _ci, _server, mut si) = pair();
    let start = std::time::Instant::now();
    let server_side = tokio::spawn(async move {
        let mut tasks = Vec::new();
        for _ in 0..STREAMS {
            let s = si.accept().await.ok_or_else(|| anyhow!("no stream"))?;
            let seed: u64 = s
                .header("seed")
                .ok_or_else(|| anyhow!("no seed"))?
                .parse()?;
            tasks.push(tokio::spawn(pump(s, pattern(seed + 1000, LEN))));
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await??);
        }
        anyhow::Ok(out)
    });
    let mut tasks = Vec::new();
    for seed in 0..STREAMS {
        let s = timeout(T, client.open(h(&[("seed", &seed.to_string())]))).await??;
        tasks.push(tokio::spawn(pump(s, pattern(seed, LEN))));
    }
    for (seed, t) in (0..STREAMS).zip(tasks) {
        let (n, digest) = timeout(Duration::from_secs(120), t).await???;
        assert_eq!(n, LEN);
        assert_eq!(
            digest,
            <[u8; 32]>::from(Sha256::digest(pattern(seed + 1000, LEN))),
            "client stream {seed}"
        );
    }
    let server_got = timeout(Duration::from_secs(120), server_side).await???;
    for (seed, (n, digest)) in (0..STREAMS).zip(server_got) {
        assert_eq!(n, LEN);
        assert_eq!(
            digest,
            <[u8; 32]>::from(Sha256::digest(pattern(seed, LEN))),
            "server stream {seed}"
        );
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!("spdy: {} MiB each way in {secs:.2}s", STREAMS * 16);
    Ok(())
}

#[tokio::test]
async fn a_reader_that_stops_reading_stops_the_writer_with_bounded_buffers() -> Result<()> {
    let (client, _ci, _server, mut si) = pair();
    let parked = tokio::spawn(async move { si.accept().await });
    let mut s = timeout(T, client.open(h(&[]))).await??;
    let _server_stream = parked.await?;
    let chunk = vec![7u8; 16 * 1024];
    let mut written = 0usize;
    loop {
        match timeout(Duration::from_millis(300), s.write_all(&chunk)).await {
            Ok(r) => {
                r?;
                written += chunk.len();
            }
            Err(_) => break,
        }
        if written > 64 * 1024 * 1024 {
            bail!("wrote {written} bytes into a stream nobody reads");
        }
    }
    // Receive buffer + writer queue + the pipe + one chunk in flight, nothing more.
    let bound = super::session::RECV_CAP
        + 2 * super::session::OUT_CAP
        + 64 * 1024
        + 2 * super::session::MAX_WRITE_CHUNK;
    assert!(
        written > 64 * 1024 && written <= bound,
        "{written} bytes buffered (bound {bound})"
    );
    Ok(())
}

#[tokio::test]
async fn ping_round_trips_from_both_sides() -> Result<()> {
    let (client, _ci, server, _si) = pair();
    timeout(T, client.ping()).await??;
    timeout(T, server.ping()).await??;
    timeout(T, client.ping()).await??;
    Ok(())
}

#[tokio::test]
async fn ping_from_a_raw_client_is_echoed() -> Result<()> {
    let (mut raw, _server, _incoming) = raw_server()?;
    raw.send(&Frame::Ping { id: 1 }).await?;
    assert_eq!(raw.recv().await?, Some(Frame::Ping { id: 1 }));
    // A ping with the server's own parity is an answer, not a question: no echo.
    raw.send(&Frame::Ping { id: 2 }).await?;
    raw.send(&Frame::Ping { id: 3 }).await?;
    assert_eq!(raw.recv().await?, Some(Frame::Ping { id: 3 }));
    Ok(())
}

#[tokio::test]
async fn reset_by_peer_fails_reads_and_writes() -> Result<()> {
    let (client, _ci, _server, mut si) = pair();
    let peer = tokio::spawn(async move {
        let s = si.accept().await.ok_or_else(|| anyhow!("no stream"))?;
        s.reset();
        anyhow::Ok(s)
    });
    let mut s = timeout(T, client.open(h(&[]))).await??;
    let _s2 = peer.await??;
    let mut buf = [0u8; 4];
    let err = timeout(T, s.read(&mut buf))
        .await?
        .err()
        .ok_or_else(|| anyhow!("read succeeded"))?;
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset);
    assert!(s.write_all(b"x").await.is_err());
    // The session itself lives on.
    timeout(T, client.ping()).await??;
    Ok(())
}

#[tokio::test]
async fn open_refused_with_rst_stream_is_an_error() -> Result<()> {
    let (a, b) = tokio::io::duplex(64 * 1024);
    let (client, _incoming) = Connection::client(a);
    let mut raw = Raw::new(b)?;
    let opening = tokio::spawn(async move { client.open(h(&[("streamtype", "error")])).await });
    let Some(Frame::SynStream {
        stream_id, headers, ..
    }) = raw.recv().await?
    else {
        bail!("no SYN_STREAM")
    };
    assert_eq!((stream_id, headers), (1, h(&[("streamtype", "error")])));
    raw.send(&Frame::RstStream {
        stream_id,
        status: rst::REFUSED_STREAM,
    })
    .await?;
    let err = timeout(T, opening)
        .await??
        .err()
        .ok_or_else(|| anyhow!("open succeeded"))?;
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
    Ok(())
}

#[tokio::test]
async fn accept_replies_and_go_style_peer_round_trips() -> Result<()> {
    // Raw client behaving like spdystream: SYN_STREAM, wait for SYN_REPLY, DATA, FIN.
    let (mut raw, _server, mut incoming) = raw_server()?;
    let headers = h(&[("streamtype", "data"), ("port", "80"), ("requestid", "0")]);
    raw.send(&Frame::SynStream {
        stream_id: 1,
        assoc_id: 0,
        priority: 0,
        flags: 0,
        headers: headers.clone(),
    })
    .await?;
    let mut s = timeout(T, incoming.accept())
        .await?
        .ok_or_else(|| anyhow!("no stream"))?;
    assert_eq!(s.headers(), &headers);
    assert_eq!(
        raw.recv().await?,
        Some(Frame::SynReply {
            stream_id: 1,
            flags: 0,
            headers: Vec::new()
        })
    );
    raw.send(&Frame::Data {
        stream_id: 1,
        flags: 0,
        data: b"GET / HTTP/1.0\r\n\r\n".to_vec(),
    })
    .await?;
    raw.send(&Frame::Data {
        stream_id: 1,
        flags: FLAG_FIN,
        data: Vec::new(),
    })
    .await?;
    let mut got = Vec::new();
    timeout(T, s.read_to_end(&mut got)).await??;
    assert_eq!(got, b"GET / HTTP/1.0\r\n\r\n");
    s.write_all(b"HTTP/1.0 200 OK\r\n").await?;
    s.shutdown().await?;
    assert_eq!(
        raw.recv().await?,
        Some(Frame::Data {
            stream_id: 1,
            flags: 0,
            data: b"HTTP/1.0 200 OK\r\n".to_vec()
        })
    );
    assert_eq!(
        raw.recv().await?,
        Some(Frame::Data {
            stream_id: 1,
            flags: FLAG_FIN,
            data: Vec::new()
        })
    );
    Ok(())
}

#[tokio::test]
async fn bad_stream_ids_are_reset_with_protocol_error() -> Result<()> {
    let (mut raw, _server, mut incoming) = raw_server()?;
    // Even id from a client: wrong parity.
    raw.send(&Frame::SynStream {
        stream_id: 2,
        assoc_id: 0,
        priority: 0,
        flags: 0,
        headers: h(&[]),
    })
    .await?;
    assert_eq!(
        raw.recv().await?,
        Some(Frame::RstStream {
            stream_id: 2,
            status: rst::PROTOCOL_ERROR
        })
    );
    raw.send(&Frame::SynStream {
        stream_id: 5,
        assoc_id: 0,
        priority: 0,
        flags: 0,
        headers: h(&[]),
    })
    .await?;
    let s = timeout(T, incoming.accept())
        .await?
        .ok_or_else(|| anyhow!("no stream"))?;
    assert_eq!(s.id(), 5);
    assert_eq!(
        raw.recv().await?,
        Some(Frame::SynReply {
            stream_id: 5,
            flags: 0,
            headers: Vec::new()
        })
    );
    // Going backwards (or reusing an id) is refused too.
    raw.send(&Frame::SynStream {
        stream_id: 3,
        assoc_id: 0,
        priority: 0,
        flags: 0,
        headers: h(&[]),
    })
    .await?;
    assert_eq!(
        raw.recv().await?,
        Some(Frame::RstStream {
            stream_id: 3,
            status: rst::PROTOCOL_ERROR
        })
    );
    Ok(())
}

#[tokio::test]
async fn dropping_a_stream_resets_it_and_later_data_is_discarded() -> Result<()> {
    let (mut raw, server, mut incoming) = raw_server()?;
    raw.send(&Frame::SynStream {
        stream_id: 1,
        assoc_id: 0,
        priority: 0,
        flags: 0,
        headers: h(&[]),
    })
    .await?;
    let s = timeout(T, incoming.accept())
        .await?
        .ok_or_else(|| anyhow!("no stream"))?;
    assert!(matches!(
        raw.recv().await?,
        Some(Frame::SynReply { stream_id: 1, .. })
    ));
    drop(s);
    assert_eq!(
        raw.recv().await?,
        Some(Frame::RstStream {
            stream_id: 1,
            status: rst::CANCEL
        })
    );
    // 1 MiB for the dead stream must not wedge the session.
    raw.send(&Frame::Data {
        stream_id: 1,
        flags: 0,
        data: vec![0; 1 << 20],
    })
    .await?;
    raw.send(&Frame::Ping { id: 7 }).await?;
    assert_eq!(raw.recv().await?, Some(Frame::Ping { id: 7 }));
    drop(server);
    Ok(())
}

#[tokio::test]
async fn goaway_closes_both_sessions() -> Result<()> {
    let (client, _ci, server, mut si) = pair();
    let s = timeout(T, async {
        let opened = tokio::spawn({
            let client = client.clone();
            async move { client.open(h(&[])).await }
        });
        let accepted = si.accept().await;
        (opened.await, accepted)
    })
    .await?;
    let (mut opened, accepted) = (s.0??, s.1.ok_or_else(|| anyhow!("no stream"))?);
    timeout(T, client.goaway()).await?;
    timeout(T, server.closed()).await?;
    timeout(T, client.closed()).await?;
    assert!(si.accept().await.is_none());
    assert!(client.open(h(&[])).await.is_err());
    assert!(opened.write_all(b"x").await.is_err());
    let mut buf = [0u8; 1];
    assert!(
        opened.read(&mut buf).await.is_err(),
        "no FIN was received: the read must fail, not EOF"
    );
    drop(accepted);
    Ok(())
}

#[tokio::test]
async fn peer_goaway_is_seen_on_the_wire_with_the_last_stream() -> Result<()> {
    let (mut raw, server, mut incoming) = raw_server()?;
    raw.send(&Frame::SynStream {
        stream_id: 1,
        assoc_id: 0,
        priority: 0,
        flags: 0,
        headers: h(&[]),
    })
    .await?;
    let _s = timeout(T, incoming.accept())
        .await?
        .ok_or_else(|| anyhow!("no stream"))?;
    let closing = tokio::spawn(async move { server.goaway().await });
    assert!(matches!(
        raw.recv().await?,
        Some(Frame::SynReply { stream_id: 1, .. })
    ));
    assert_eq!(
        raw.recv().await?,
        Some(Frame::GoAway {
            last_good: 1,
            status: goaway::OK
        })
    );
    assert_eq!(
        raw.recv().await?,
        None,
        "the connection is closed after GOAWAY"
    );
    drop(raw);
    timeout(T, closing).await??;
    Ok(())
}

#[tokio::test]
async fn malformed_frames_end_the_session_with_goaway_protocol_error() -> Result<()> {
    let cases: Vec<Vec<u8>> = vec![
        vec![0x80, 2, 0, 1, 0, 0, 0, 0],          // SPDY/2
        vec![0x80, 3, 0, 6, 0, 0, 0, 3, 0, 0, 0], // short PING
        vec![
            0x80, 3, 0, 1, 0, 0, 0, 14, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4,
        ], // not zlib
        vec![0x80, 3, 0, 8, 0xff, 0xff, 0xff, 0xff], // 16 MiB control frame
        vec![0, 0, 0, 0, 0, 0, 0, 1, 0],          // DATA on stream 0
    ];
    for wire in cases {
        let (mut raw, server, _incoming) = raw_server()?;
        raw.io.write_all(&wire).await?;
        assert_eq!(
            raw.recv().await?,
            Some(Frame::GoAway {
                last_good: 0,
                status: goaway::PROTOCOL_ERROR
            }),
            "{wire:?}"
        );
        assert_eq!(raw.recv().await?, None);
        timeout(T, server.closed()).await?;
    }
    Ok(())
}

#[tokio::test]
async fn peer_hangup_ends_the_session_and_pending_opens() -> Result<()> {
    let (a, b) = tokio::io::duplex(1024);
    let (client, mut incoming) = Connection::client(a);
    let opening = tokio::spawn({
        let client = client.clone();
        async move { client.open(h(&[])).await }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    drop(b);
    timeout(T, client.closed()).await?;
    assert!(timeout(T, opening).await??.is_err());
    assert!(incoming.accept().await.is_none());
    assert!(client.ping().await.is_err());
    Ok(())
}

#[tokio::test]
async fn forbidden_connection_headers_are_refused_before_sending() -> Result<()> {
    let (client, _ci, _server, _si) = pair();
    let err = client
        .open(h(&[("Connection", "close")]))
        .await
        .err()
        .ok_or_else(|| anyhow!("accepted"))?;
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    Ok(())
}

#[test]
fn frame_constants_match_the_spec() {
    assert_eq!(
        [
            frame::TYPE_SYN_STREAM,
            frame::TYPE_SYN_REPLY,
            frame::TYPE_RST_STREAM,
            frame::TYPE_SETTINGS,
            frame::TYPE_PING,
            frame::TYPE_GOAWAY,
            frame::TYPE_HEADERS,
            frame::TYPE_WINDOW_UPDATE
        ],
        [1, 2, 3, 4, 6, 7, 8, 9]
    );
}

#[tokio::test]
async fn dropping_every_handle_says_goaway_and_hangs_up() -> Result<()> {
    let (mut raw, server, incoming) = raw_server()?;
    raw.send(&Frame::SynStream {
        stream_id: 1,
        assoc_id: 0,
        priority: 0,
        flags: 0,
        headers: h(&[]),
    })
    .await?;
    let mut incoming = incoming;
    let s = timeout(T, incoming.accept())
        .await?
        .ok_or_else(|| anyhow!("no stream"))?;
    assert!(matches!(
        raw.recv().await?,
        Some(Frame::SynReply { stream_id: 1, .. })
    ));
    drop(server);
    drop(incoming);
    // The stream still holds the session open: it can be used.
    timeout(T, raw.send(&Frame::Ping { id: 9 })).await??;
    assert_eq!(raw.recv().await?, Some(Frame::Ping { id: 9 }));
    drop(s);
    assert_eq!(
        raw.recv().await?,
        Some(Frame::RstStream {
            stream_id: 1,
            status: rst::CANCEL
        })
    );
    assert_eq!(
        raw.recv().await?,
        Some(Frame::GoAway {
            last_good: 1,
            status: goaway::OK
        })
    );
    assert_eq!(raw.recv().await?, None);
    Ok(())
}

#[tokio::test]
async fn one_huge_data_frame_arrives_whole_through_the_bounded_buffer() -> Result<()> {
    // spdystream writes each Write() as one DATA frame, of any size up to 2^24-1.
    let (mut raw, _server, mut incoming) = raw_server()?;
    raw.send(&Frame::SynStream {
        stream_id: 1,
        assoc_id: 0,
        priority: 0,
        flags: 0,
        headers: h(&[]),
    })
    .await?;
    let mut s = timeout(T, incoming.accept())
        .await?
        .ok_or_else(|| anyhow!("no stream"))?;
    let big = pattern(5, super::frame::MAX_DATA_LEN);
    let sender = tokio::spawn(async move {
        raw.send(&Frame::Data {
            stream_id: 1,
            flags: FLAG_FIN,
            data: big,
        })
        .await?;
        anyhow::Ok(raw)
    });
    let mut got = Vec::new();
    timeout(T, s.read_to_end(&mut got)).await??;
    assert_eq!(got.len(), super::frame::MAX_DATA_LEN);
    assert!(got == pattern(5, super::frame::MAX_DATA_LEN));
    let mut raw = timeout(T, sender).await???;
    // Like spdystream, no WINDOW_UPDATE for the 16 MiB consumed: a peer that closes with
    // them unread would reset the connection and lose its unsent output.
    drop(s);
    assert_eq!(
        raw.recv().await?,
        Some(Frame::SynReply {
            stream_id: 1,
            flags: 0,
            headers: h(&[])
        })
    );
    let next = raw.recv().await?;
    assert!(
        !matches!(next, Some(Frame::WindowUpdate { .. })),
        "{next:?}"
    );
    Ok(())
}

#[tokio::test]
async fn syn_stream_flags_fin_and_unidirectional_are_honoured() -> Result<()> {
    let (mut raw, _server, mut incoming) = raw_server()?;
    raw.send(&Frame::SynStream {
        stream_id: 1,
        assoc_id: 0,
        priority: 0,
        flags: FLAG_FIN,
        headers: h(&[]),
    })
    .await?;
    let mut s = timeout(T, incoming.accept())
        .await?
        .ok_or_else(|| anyhow!("no stream"))?;
    let mut buf = [0u8; 8];
    assert_eq!(
        timeout(T, s.read(&mut buf)).await??,
        0,
        "FIN on SYN_STREAM: nothing to read"
    );
    s.write_all(b"ok").await?;
    let flags = frame::FLAG_UNIDIRECTIONAL;
    raw.send(&Frame::SynStream {
        stream_id: 3,
        assoc_id: 0,
        priority: 0,
        flags,
        headers: h(&[]),
    })
    .await?;
    let mut u = timeout(T, incoming.accept())
        .await?
        .ok_or_else(|| anyhow!("no stream"))?;
    assert!(
        u.write_all(b"no").await.is_err(),
        "unidirectional: this side may not send"
    );
    assert!(matches!(
        raw.recv().await?,
        Some(Frame::SynReply { stream_id: 1, .. })
    ));
    assert_eq!(
        raw.recv().await?,
        Some(Frame::Data {
            stream_id: 1,
            flags: 0,
            data: b"ok".to_vec()
        })
    );
    Ok(())
}

#[tokio::test]
async fn headers_too_large_for_a_frame_fail_the_open_instead_of_corrupting_the_wire() -> Result<()>
{
    let (client, _ci, _server, _si) = pair();
    let noise: String = pattern(9, 200_000)
        .iter()
        .map(|b| char::from(b'a' + b % 26))
        .collect();
    let r = timeout(T, client.open(h(&[("x", &noise)]))).await?;
    assert!(r.is_err());
    timeout(T, client.closed()).await?;
    Ok(())
}
