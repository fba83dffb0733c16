//! SPDY session tests against a raw-frame peer: what is on the wire, and what a well-behaved session never sends.

use super::*;

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
