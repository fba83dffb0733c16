//! Tests of [`AuthorityFix`]: client byte streams in, what h2 would read out.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

const CLIENT_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn request(authority: &str, path: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        ("x-big", &"v".repeat(20_000)),
    ]
    .iter()
    .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
    .collect()
}

/// The client's bytes: preface, SETTINGS, then for each request a header block (split over
/// HEADERS and CONTINUATION, the first padded and with priority) and a DATA frame.
fn client_stream(authority: &str, requests: usize) -> Vec<u8> {
    let mut enc = Encoder::new();
    let mut out = CLIENT_PREFACE.to_vec();
    out.extend(frame(0x4, 0, 0, &[]));
    for i in 0..requests {
        let stream = 1 + 2 * i as u32;
        let headers = request(authority, &format!("/runtime.v1.RuntimeService/Version{i}"));
        let block = enc.encode(headers.iter().map(|(n, v)| (&n[..], &v[..])));
        let (a, b) = block.split_at(block.len() / 2);
        let mut first = vec![3u8]; // pad length
        first.extend_from_slice(&[0, 0, 0, 0, 16]); // priority: no dependency, weight 16
        first.extend_from_slice(a);
        first.extend_from_slice(&[0, 0, 0]);
        out.extend(frame(HEADERS, PADDED | PRIORITY, stream, &first));
        out.extend(frame(CONTINUATION, END_HEADERS, stream, b));
        out.extend(frame(0x0, END_STREAM, stream, b"\0\0\0\0\0"));
    }
    out
}

/// Feeds `input` through the fix in small pieces; returns what h2 would read.
async fn through_fix(input: Vec<u8>) -> Vec<u8> {
    let (mut client, server) = tokio::io::duplex(1 << 20);
    let writer = tokio::spawn(async move {
        for piece in input.chunks(1000) {
            client.write_all(piece).await.expect("write");
        }
        client.shutdown().await.expect("shutdown");
        client
    });
    let mut fix = AuthorityFix::new(server);
    let mut out = Vec::new();
    fix.read_to_end(&mut out).await.expect("read");
    drop(writer.await.expect("writer"));
    out
}

/// Parses h2's view: header lists (decoded with one HPACK decoder, as h2 does) and DATA.
/// One decoded header list.
type HeaderList = Vec<(Vec<u8>, Vec<u8>)>;

fn server_view(bytes: &[u8]) -> (Vec<HeaderList>, usize) {
    assert!(bytes.starts_with(CLIENT_PREFACE));
    let mut rest = &bytes[CLIENT_PREFACE.len()..];
    let mut dec = Decoder::new();
    let (mut lists, mut data, mut block) = (Vec::new(), 0, Vec::new());
    while !rest.is_empty() {
        let len = usize::from(rest[0]) << 16 | usize::from(rest[1]) << 8 | usize::from(rest[2]);
        let (kind, flags) = (rest[3], rest[4]);
        assert!(len <= MAX_FRAME, "frame of {len} bytes");
        let payload = &rest[FRAME_HEADER..FRAME_HEADER + len];
        match kind {
            HEADERS | CONTINUATION => {
                let mut p = payload;
                if kind == HEADERS && flags & PADDED != 0 {
                    let pad = usize::from(p[0]);
                    p = &p[1..p.len() - pad];
                }
                if kind == HEADERS && flags & PRIORITY != 0 {
                    p = &p[5..];
                }
                block.extend_from_slice(p);
                if flags & END_HEADERS != 0 {
                    lists.push(dec.decode(&block).expect("h2 decodes it"));
                    block.clear();
                }
            }
            0x0 => data += 1,
            _ => {}
        }
        rest = &rest[FRAME_HEADER + len..];
    }
    (lists, data)
}

fn authority(list: &[(Vec<u8>, Vec<u8>)]) -> String {
    list.iter()
        .find(|(n, _)| n == b":authority")
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_percent_encoded_authority_becomes_localhost_on_every_request() {
    let input = client_stream("run%2Fbosun%2Fbosun.sock", 3);
    let out = through_fix(input).await;
    let (lists, data) = server_view(&out);
    assert_eq!((lists.len(), data), (3, 3));
    for (i, list) in lists.iter().enumerate() {
        assert_eq!(authority(list), "localhost", "request {i}");
        let want = request(
            "localhost",
            &format!("/runtime.v1.RuntimeService/Version{i}"),
        );
        assert_eq!(list, &want, "request {i} keeps every other header");
        http::uri::Authority::try_from(&b"localhost"[..]).expect("valid");
    }
}

#[tokio::test]
async fn a_valid_authority_passes_byte_for_byte() {
    for authority in ["localhost", "127.0.0.1:10010", "node.example:443"] {
        let input = client_stream(authority, 2);
        let out = through_fix(input.clone()).await;
        assert!(out == input, "{authority}: bytes changed");
    }
}

#[tokio::test]
async fn garbage_and_truncated_streams_reach_h2_unchanged() {
    let mut garbage = CLIENT_PREFACE.to_vec();
    garbage.extend(frame(HEADERS, END_HEADERS, 1, &[0xff, 0xff, 0xff, 0xff]));
    assert!(through_fix(garbage.clone()).await == garbage);
    let mut cut = client_stream("run%2Fx.sock", 1);
    cut.truncate(cut.len() - 7);
    let out = through_fix(cut).await;
    assert!(out.starts_with(CLIENT_PREFACE));
}
