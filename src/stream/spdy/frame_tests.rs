//! Tests of the SPDY/3 frame codec: round trips, Go's fixed layouts, zlib interop, hostile input.

use super::*;

fn h(pairs: &[(&str, &str)]) -> Headers {
    pairs
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

fn all_frames() -> Vec<Frame> {
    vec![
        Frame::SynStream {
            stream_id: 1,
            assoc_id: 0,
            priority: 0,
            flags: 0,
            headers: h(&[("streamtype", "error")]),
        },
        Frame::SynStream {
            stream_id: 0x7fff_ffff,
            assoc_id: 3,
            priority: 7,
            flags: FLAG_FIN | FLAG_UNIDIRECTIONAL,
            headers: h(&[("streamtype", "data"), ("port", "80"), ("requestid", "1")]),
        },
        Frame::SynReply {
            stream_id: 1,
            flags: 0,
            headers: Vec::new(),
        },
        Frame::SynReply {
            stream_id: 3,
            flags: FLAG_FIN,
            headers: h(&[("a", "b")]),
        },
        Frame::RstStream {
            stream_id: 5,
            status: rst::CANCEL,
        },
        Frame::Settings {
            flags: 1,
            entries: vec![
                Setting {
                    flags: 1,
                    id: 7,
                    value: 65536,
                },
                Setting {
                    flags: 0,
                    id: 4,
                    value: 100,
                },
            ],
        },
        Frame::Settings {
            flags: 0,
            entries: Vec::new(),
        },
        Frame::Ping { id: 1 },
        Frame::GoAway {
            last_good: 9,
            status: goaway::OK,
        },
        Frame::Headers {
            stream_id: 2,
            flags: FLAG_FIN,
            headers: h(&[("x", "y")]),
        },
        Frame::WindowUpdate {
            stream_id: 0,
            delta: 32768,
        },
        Frame::Data {
            stream_id: 1,
            flags: 0,
            data: b"hello".to_vec(),
        },
        Frame::Data {
            stream_id: 2,
            flags: FLAG_FIN,
            data: Vec::new(),
        },
    ]
}

#[test]
fn every_frame_type_round_trips_on_one_zlib_context() -> anyhow::Result<()> {
    let mut d = Deflater::new()?;
    let mut i = Inflater::default();
    let mut wire = Vec::new();
    let frames = all_frames();
    for f in &frames {
        encode(f, &mut d, &mut wire)?;
    }
    let mut at = 0;
    for want in &frames {
        let (got, used) = decode(&wire[at..], &mut i)?.ok_or_else(|| anyhow::anyhow!("short"))?;
        assert_eq!(got.as_ref(), Some(want));
        at += used;
    }
    assert_eq!(at, wire.len());
    Ok(())
}

/// Bytes laid out exactly as spdystream's framer writes them (write.go).
#[test]
fn fixed_layouts_match_go() -> anyhow::Result<()> {
    let mut d = Deflater::new()?;
    let cases: Vec<(Frame, &[u8])> = vec![
        (
            Frame::RstStream {
                stream_id: 3,
                status: 5,
            },
            &[0x80, 3, 0, 3, 0, 0, 0, 8, 0, 0, 0, 3, 0, 0, 0, 5],
        ),
        (
            Frame::Ping { id: 2 },
            &[0x80, 3, 0, 6, 0, 0, 0, 4, 0, 0, 0, 2],
        ),
        (
            Frame::GoAway {
                last_good: 7,
                status: 0,
            },
            &[0x80, 3, 0, 7, 0, 0, 0, 8, 0, 0, 0, 7, 0, 0, 0, 0],
        ),
        (
            Frame::WindowUpdate {
                stream_id: 1,
                delta: 0x10000,
            },
            &[0x80, 3, 0, 9, 0, 0, 0, 8, 0, 0, 0, 1, 0, 1, 0, 0],
        ),
        (
            Frame::Settings {
                flags: 0,
                entries: vec![Setting {
                    flags: 1,
                    id: 7,
                    value: 0x10000,
                }],
            },
            &[
                0x80, 3, 0, 4, 0, 0, 0, 12, 0, 0, 0, 1, 1, 0, 0, 7, 0, 1, 0, 0,
            ],
        ),
        (
            Frame::Data {
                stream_id: 5,
                flags: FLAG_FIN,
                data: b"ab".to_vec(),
            },
            &[0, 0, 0, 5, 1, 0, 0, 2, b'a', b'b'],
        ),
    ];
    for (f, want) in cases {
        let mut out = Vec::new();
        encode(&f, &mut d, &mut out)?;
        assert_eq!(out, want, "{f:?}");
    }
    Ok(())
}

/// Two SYN_STREAMs whose header blocks were compressed by a standard zlib (Python's, the
/// same stream format Go's compress/zlib writes) with the SPDY/3 dictionary, on ONE context,
/// each ended by a sync flush: `zlib.compressobj(level=9, zdict=DICT)`.
#[test]
fn decodes_reference_syn_streams_from_standard_zlib() -> anyhow::Result<()> {
    let b1 = hex::decode("78f9e3c6a7c202a62346703a2b294a4dcc851625aca9a08006000000ffff")?;
    let b2 = hex::decode("02651c0c2960624ec90797d1c022bb084c5b18581800000000ffff")?;
    let mut wire = Vec::new();
    for (id, b) in [(1u32, &b1), (3, &b2)] {
        wire.extend_from_slice(&[0x80, 3, 0, 1, 0, 0, 0, (10 + b.len()) as u8]);
        wire.extend_from_slice(&id.to_be_bytes());
        wire.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        wire.extend_from_slice(b);
    }
    let mut i = Inflater::default();
    let (f1, n1) = decode(&wire, &mut i)?.ok_or_else(|| anyhow::anyhow!("short"))?;
    let (f2, _) = decode(&wire[n1..], &mut i)?.ok_or_else(|| anyhow::anyhow!("short"))?;
    let want1 = Frame::SynStream {
        stream_id: 1,
        assoc_id: 0,
        priority: 0,
        flags: 0,
        headers: h(&[("streamtype", "error")]),
    };
    let want2 = Frame::SynStream {
        stream_id: 3,
        assoc_id: 0,
        priority: 0,
        flags: 0,
        headers: h(&[("streamtype", "stdout"), ("port", "8080")]),
    };
    assert_eq!(f1, Some(want1));
    assert_eq!(f2, Some(want2));
    Ok(())
}

#[test]
fn our_compressed_blocks_use_the_dictionary_stream_format() -> anyhow::Result<()> {
    let mut out = Vec::new();
    encode(
        &Frame::SynReply {
            stream_id: 1,
            flags: 0,
            headers: Vec::new(),
        },
        &mut Deflater::new()?,
        &mut out,
    )?;
    let block = &out[12..];
    // zlib header with FDICT set, then the dictionary's Adler-32 (0xe3c6a7c2)...
    assert_eq!(block[0], 0x78);
    assert_ne!(block[1] & 0x20, 0);
    assert_eq!(&block[2..6], &[0xe3, 0xc6, 0xa7, 0xc2]);
    // ...and a sync flush marker at the end.
    assert_eq!(&block[block.len() - 4..], &[0, 0, 0xff, 0xff]);
    Ok(())
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let mut i = Inflater::default();
    let bad: Vec<(&[u8], FrameError)> = vec![
        (
            &[0x80, 2, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1],
            FrameError::Version(2),
        ),
        (
            &[0x80, 3, 0, 1, 0, 1, 0, 1],
            FrameError::TooLarge {
                kind: 1,
                len: 65537,
                max: MAX_CONTROL_LEN,
            },
        ),
        (&[0, 0, 0, 0, 0, 0, 0, 0], FrameError::ZeroStreamId(0)),
        (
            &[0x80, 3, 0, 3, 0, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0],
            FrameError::Invalid("RST_STREAM"),
        ),
        (
            &[0x80, 3, 0, 3, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 5],
            FrameError::ZeroStreamId(3),
        ),
        (
            &[0x80, 3, 0, 6, 0, 0, 0, 3, 0, 0, 0],
            FrameError::Length { kind: 6, len: 3 },
        ),
        (
            &[0x80, 3, 0, 7, 0, 0, 0, 4, 0, 0, 0, 0],
            FrameError::Length { kind: 7, len: 4 },
        ),
        (
            &[0x80, 3, 0, 4, 0, 0, 0, 4, 0xff, 0xff, 0xff, 0xff],
            FrameError::Length { kind: 4, len: 4 },
        ),
        (
            &[0x80, 3, 0, 1, 0, 0, 0, 4, 0, 0, 0, 1],
            FrameError::Length { kind: 1, len: 4 },
        ),
    ];
    for (wire, want) in bad {
        assert_eq!(decode(wire, &mut i), Err(want), "{wire:?}");
    }
    // A SYN_STREAM whose header block is not zlib.
    let wire = [
        0x80, 3, 0, 1, 0, 0, 0, 14, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4,
    ];
    assert!(matches!(
        decode(&wire, &mut Inflater::default()),
        Err(FrameError::Header(_))
    ));
}

#[test]
fn unknown_control_types_are_skipped() -> anyhow::Result<()> {
    // CREDENTIAL (10) and NOOP (5) exist in SPDY/3 drafts; the spec says ignore unknown types.
    let wire = [0x80, 3, 0, 10, 0, 0, 0, 2, 9, 9];
    assert_eq!(decode(&wire, &mut Inflater::default())?, Some((None, 10)));
    Ok(())
}

#[test]
fn arbitrary_bytes_never_panic() {
    // A deterministic pseudo-random sweep over short inputs, many shaped like frame heads.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for n in 0..20_000 {
        let mut buf = Vec::new();
        for _ in 0..(n % 40) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf.push(x as u8);
        }
        if n % 2 == 0 && buf.len() >= 8 {
            buf[0] = 0x80;
            buf[1] = 3;
            buf[2] = 0;
            buf[3] %= 11;
            buf[5] = 0;
            buf[6] = 0;
            buf[7] %= 40;
        }
        let _ = decode(&buf, &mut Inflater::default());
    }
}
