//! Unit tests of the monitor's attach server: framing, fan-out, a slow client, stdin, resize, reopen.

use std::os::fd::OwnedFd;

use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketAddrUnix, SocketFlags, SocketType};

use super::attach::{AttachReady, AttachServer};
use super::attach_proto::{
    resize_message, IN_REOPEN_LOG, IN_STDIN, IN_STDIN_EOF, OUT_LOG_REOPENED, OUT_STDERR,
    OUT_STDOUT, READY, SOCKET_NAME,
};
use super::container_io::ContainerIo;
use super::cri_log::Stream;

fn connect(dir: &std::path::Path) -> OwnedFd {
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .expect("socket");
    let addr = SocketAddrUnix::new(dir.join(SOCKET_NAME)).expect("addr");
    rustix::net::connect(&fd, &addr).expect("connect");
    fd
}

/// Runs the server's accept/serve step as if the poll had reported everything ready.
fn serve_all(server: &mut AttachServer, io: &mut ContainerIo) {
    let ready = AttachReady::all(server.clients());
    let mut buf = vec![0u8; 16 * 1024];
    server.service(&ready, io, &mut buf);
}

fn recv(fd: &OwnedFd) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 32 * 1024];
    match rustix::net::recv(fd, &mut buf[..], RecvFlags::DONTWAIT) {
        Ok((n, _)) => {
            buf.truncate(n);
            Some(buf)
        }
        Err(_) => None,
    }
}

fn send(fd: &OwnedFd, msg: &[u8]) {
    rustix::net::send(fd, msg, SendFlags::empty()).expect("send");
}

fn no_io() -> ContainerIo {
    ContainerIo {
        outputs: Vec::new(),
        stdin: None,
    }
}

#[test]
fn output_reaches_every_client_tagged_with_its_stream() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = AttachServer::bind(dir.path(), false, false).expect("bind");
    let mut io = no_io();
    let (a, b) = (connect(dir.path()), connect(dir.path()));
    serve_all(&mut server, &mut io);
    assert_eq!(server.clients(), 2);
    for c in [&a, &b] {
        assert_eq!(recv(c), Some(READY.to_vec()), "accepted");
    }
    server.broadcast(Stream::Stdout, b"out line\n", &mut io);
    server.broadcast(Stream::Stderr, b"err", &mut io);
    for c in [&a, &b] {
        assert_eq!(recv(c), Some([&[OUT_STDOUT][..], b"out line\n"].concat()));
        assert_eq!(recv(c), Some([&[OUT_STDERR][..], b"err"].concat()));
    }
    drop(server);
    assert!(
        !dir.path().join(SOCKET_NAME).exists(),
        "socket removed on drop"
    );
    assert_eq!(recv(&a), Some(Vec::new()), "EOF once the server is gone");
}

#[test]
fn a_client_that_does_not_read_is_dropped_after_its_queue_and_never_blocks_the_others() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = AttachServer::bind(dir.path(), false, false).expect("bind");
    let mut io = no_io();
    let (fast, slow) = (connect(dir.path()), connect(dir.path()));
    serve_all(&mut server, &mut io);
    assert_eq!(recv(&fast), Some(READY.to_vec()), "accepted");
    let chunk = vec![b'x'; 16 * 1024];
    let mut delivered = 0;
    for _ in 0..1000 {
        server.broadcast(Stream::Stdout, &chunk, &mut io);
        let got = recv(&fast).expect("the fast client gets every chunk");
        assert_eq!(got.len(), chunk.len() + 1);
        delivered += 1;
        if server.clients() == 1 {
            break;
        }
    }
    assert_eq!(server.clients(), 1, "the stuck client was disconnected");
    assert!(delivered < 1000, "dropped after {delivered} chunks");
    // The dropped client reads what was queued, then end of file.
    let mut queued = 0;
    while let Some(m) = recv(&slow) {
        if m.is_empty() {
            break;
        }
        if m != READY {
            queued += 1;
        }
    }
    assert!(queued > 0 && queued < delivered, "queued {queued}");
    server.broadcast(Stream::Stdout, b"still flowing", &mut io);
    assert_eq!(
        recv(&fast),
        Some([&[OUT_STDOUT][..], b"still flowing"].concat())
    );
}

#[test]
fn a_client_that_pauses_gets_every_byte_from_its_queue() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = AttachServer::bind(dir.path(), false, false).expect("bind");
    let mut io = no_io();
    let (fast, paused) = (connect(dir.path()), connect(dir.path()));
    serve_all(&mut server, &mut io);
    assert_eq!(recv(&fast), Some(READY.to_vec()));
    assert_eq!(recv(&paused), Some(READY.to_vec()));
    // 2 MiB while `paused` reads nothing: far more than its socket buffer.
    let chunks = 128;
    for i in 0..chunks {
        let chunk = vec![i as u8; 16 * 1024];
        server.broadcast(Stream::Stdout, &chunk, &mut io);
        assert_eq!(recv(&fast).map(|m| m.len()), Some(chunk.len() + 1));
    }
    assert_eq!(
        server.clients(),
        2,
        "a lagging client within the queue limit stays"
    );
    // It resumes: every chunk arrives, in order, as the server flushes its queue.
    let mut got = 0;
    for _ in 0..100_000 {
        while let Some(m) = recv(&paused) {
            assert_eq!(m.len(), 16 * 1024 + 1);
            assert_eq!(
                (m[0], m[1]),
                (OUT_STDOUT, got as u8),
                "chunk {got} in order"
            );
            got += 1;
        }
        if got == chunks {
            break;
        }
        serve_all(&mut server, &mut io);
    }
    assert_eq!(got, chunks);
    // Caught up: new output goes straight through again.
    server.broadcast(Stream::Stdout, b"live", &mut io);
    assert_eq!(recv(&paused), Some([&[OUT_STDOUT][..], b"live"].concat()));
}

#[test]
fn client_input_reaches_stdin_and_stdin_once_closes_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = AttachServer::bind(dir.path(), true, false).expect("bind");
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("pipe");
    let mut io = ContainerIo {
        outputs: Vec::new(),
        stdin: Some(w),
    };
    let (a, b) = (connect(dir.path()), connect(dir.path()));
    serve_all(&mut server, &mut io);
    send(&a, &[&[IN_STDIN][..], b"from a\n"].concat());
    send(&b, &[&[IN_STDIN][..], b"from b\n"].concat());
    serve_all(&mut server, &mut io);
    let mut buf = [0u8; 64];
    let n = rustix::io::read(&r, &mut buf).expect("read");
    let got = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(
        got.contains("from a\n") && got.contains("from b\n"),
        "{got:?}"
    );
    send(&a, &[IN_STDIN_EOF]);
    serve_all(&mut server, &mut io);
    assert!(io.stdin.is_none(), "stdin-once: closed after the first EOF");
    assert_eq!(rustix::io::read(&r, &mut buf).expect("read"), 0, "EOF");
}

#[test]
fn without_stdin_once_a_detach_keeps_stdin_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = AttachServer::bind(dir.path(), false, false).expect("bind");
    let (_r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("pipe");
    let mut io = ContainerIo {
        outputs: Vec::new(),
        stdin: Some(w),
    };
    let a = connect(dir.path());
    serve_all(&mut server, &mut io);
    send(&a, &[IN_STDIN]);
    send(&a, &[IN_STDIN_EOF]);
    serve_all(&mut server, &mut io);
    serve_all(&mut server, &mut io);
    drop(a);
    serve_all(&mut server, &mut io);
    assert_eq!(server.clients(), 0, "the closed client is gone");
    assert!(io.stdin.is_some(), "stdin stays open for the next attach");
}

#[test]
fn resize_sets_the_terminal_size() {
    use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = AttachServer::bind(dir.path(), false, true).expect("bind");
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("openpt");
    grantpt(&master).expect("grantpt");
    unlockpt(&master).expect("unlockpt");
    let name = ptsname(&master, Vec::new()).expect("ptsname");
    let slave = rustix::fs::open(
        name.as_c_str(),
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NOCTTY,
        rustix::fs::Mode::empty(),
    )
    .expect("slave");
    let mut io = super::container_io::terminal(master, false, 0).expect("terminal io");
    let a = connect(dir.path());
    serve_all(&mut server, &mut io);
    send(&a, &resize_message(132, 43));
    serve_all(&mut server, &mut io);
    let ws = rustix::termios::tcgetwinsize(&slave).expect("winsize");
    assert_eq!((ws.ws_col, ws.ws_row), (132, 43));
}

#[test]
fn a_reopen_request_is_answered_after_the_output_before_it_and_only_to_its_client() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = AttachServer::bind(dir.path(), false, false).expect("bind");
    let mut io = no_io();
    let (asker, other) = (connect(dir.path()), connect(dir.path()));
    serve_all(&mut server, &mut io);
    assert!(!server.reopen_requested());
    send(&asker, &[IN_REOPEN_LOG]);
    serve_all(&mut server, &mut io);
    assert!(server.reopen_requested());
    server.broadcast(Stream::Stdout, b"before", &mut io);
    server.reopened(None, &mut io);
    assert!(!server.reopen_requested(), "answered once");
    for c in [&asker, &other] {
        assert_eq!(recv(c), Some(READY.to_vec()));
        assert_eq!(recv(c), Some([&[OUT_STDOUT][..], b"before"].concat()));
    }
    assert_eq!(recv(&asker), Some(vec![OUT_LOG_REOPENED]));
    assert_eq!(
        recv(&other),
        None,
        "no answer for a client that did not ask"
    );
    send(&other, &[IN_REOPEN_LOG]);
    serve_all(&mut server, &mut io);
    server.reopened(Some("open log file /x: denied"), &mut io);
    assert_eq!(
        recv(&other),
        Some([&[OUT_LOG_REOPENED][..], b"open log file /x: denied"].concat())
    );
}
