//! SPDY session tests between two of ours (client and server over an in-memory duplex): streams, data, pings, resets, GOAWAY.

use super::*;

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

/// Writes `data` in uneven chunks while reading everything the peer sends; returns the digest
/// of what was read.
async fn pump(mut s: crate::stream::spdy::Stream, data: Vec<u8>) -> Result<(usize, [u8; 32])> {
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
    let bound = crate::stream::spdy::session::RECV_CAP
        + 2 * crate::stream::spdy::session::OUT_CAP
        + 64 * 1024
        + 2 * crate::stream::spdy::session::MAX_WRITE_CHUNK;
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
