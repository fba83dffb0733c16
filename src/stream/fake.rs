//! A fake backend for the server's tests: a tiny command interpreter instead of containers, an echo server instead of pods.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{broadcast, mpsc, oneshot};

use super::backend::Backend;
use crate::error::{Error, Result};
use crate::runtime::{Session, SessionEnd, StreamRequest, TerminalSize};

/// Commands: `echo ARGS…`, `exit N`, `cat` (stdin to stdout), `err TEXT` (to stderr),
/// `big N` (N pattern bytes), `size` (prints the first resize as `ROWS COLS`), `sleep`.
pub struct Fake {
    echo: SocketAddr,
    /// Output of the fake container, seen by every attach; None once its stdio closed.
    container_out: std::sync::Mutex<Option<broadcast::Sender<Vec<u8>>>>,
    /// Exec'd "processes" still alive.
    pub live: Arc<AtomicUsize>,
}

/// The pattern `big` writes: byte i is i mod 251.
pub fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

impl Fake {
    pub async fn new() -> Arc<Fake> {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind echo");
        let echo = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                    let _ = w.shutdown().await;
                });
            }
        });
        Arc::new(Fake {
            echo,
            container_out: std::sync::Mutex::new(Some(broadcast::channel(64).0)),
            live: Arc::new(AtomicUsize::new(0)),
        })
    }
}

impl Fake {
    fn out(&self) -> Option<broadcast::Sender<Vec<u8>>> {
        self.container_out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
    /// The container writes `data` to its stdout.
    pub fn write(&self, data: &[u8]) {
        if let Some(tx) = self.out() {
            let _ = tx.send(data.to_vec());
        }
    }
    /// Attached clients.
    pub fn attached(&self) -> usize {
        self.out().map_or(0, |tx| tx.receiver_count())
    }
    /// The container closes its stdio (exits).
    pub fn close_stdio(&self) {
        self.container_out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
    }
}

fn check(id: &str, what: &str) -> Result<String> {
    match id {
        "gone" => Err(Error::not_found(format!("{what} gone: not found"))),
        "stopped" => Err(Error::precondition(format!("{what} stopped: not running"))),
        _ => Ok(id.to_string()),
    }
}

/// Decrements the live count when the "process" ends or is dropped with its session.
struct Alive(Arc<AtomicUsize>);
impl Drop for Alive {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Aborts the fake process when its session goes.
struct KillOnDrop(tokio::task::AbortHandle, #[allow(dead_code)] Alive);
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Backend for Fake {
    fn running_container(&self, id: &str) -> Result<String> {
        check(id, "container")
    }
    fn ready_sandbox(&self, id: &str) -> Result<String> {
        check(id, "sandbox")
    }

    fn exec(
        &self,
        _id: String,
        cmd: Vec<String>,
        req: StreamRequest,
    ) -> BoxFuture<'static, Result<Session>> {
        let live = self.live.clone();
        Box::pin(async move {
            live.fetch_add(1, Ordering::SeqCst);
            let alive = Alive(live);
            let (stdin_ours, stdin_theirs) = tokio::io::duplex(64 << 10);
            let (out_theirs, out_ours) = tokio::io::duplex(64 << 10);
            let (err_theirs, err_ours) = tokio::io::duplex(64 << 10);
            let (rtx, rrx) = mpsc::unbounded_channel();
            let (done_tx, done_rx) = oneshot::channel();
            let tty = req.tty;
            let task = tokio::spawn(async move {
                let code = run(cmd, stdin_theirs, out_theirs, err_theirs, rrx).await;
                let _ = done_tx.send(code);
            });
            // Dropping the session before the end "kills the process".
            let kill = KillOnDrop(task.abort_handle(), alive);
            Ok(Session {
                stdin: req.stdin.then(|| Box::pin(stdin_ours) as _),
                stdout: req.stdout.then(|| Box::pin(out_ours) as _),
                stderr: (req.stderr && !tty).then(|| Box::pin(err_ours) as _),
                resize: tty.then_some(rtx),
                done: Box::pin(async move {
                    let _kill = kill;
                    done_rx
                        .await
                        .map(SessionEnd::Exited)
                        .map_err(|_| Error::internal("fake exec vanished"))
                }),
            })
        })
    }

    fn attach(&self, _id: String, req: StreamRequest) -> BoxFuture<'static, Result<Session>> {
        let rx = self.out().map(|tx| tx.subscribe());
        Box::pin(async move {
            let mut rx = rx.ok_or_else(|| Error::precondition("fake container exited"))?;
            let (mut theirs, ours) = tokio::io::duplex(64 << 10);
            let (end_tx, end_rx) = oneshot::channel();
            tokio::spawn(async move {
                // Output until the "container" closes its stdio (sender dropped).
                while let Ok(chunk) = rx.recv().await {
                    if theirs.write_all(&chunk).await.is_err() {
                        return;
                    }
                }
                drop(theirs);
                let _ = end_tx.send(());
            });
            Ok(Session {
                stdin: None,
                stdout: req.stdout.then(|| Box::pin(ours) as _),
                stderr: None,
                resize: None,
                done: Box::pin(async move {
                    let _ = end_rx.await;
                    Ok(SessionEnd::Detached)
                }),
            })
        })
    }

    fn port_forward(&self, _id: String, port: u16) -> BoxFuture<'static, Result<TcpStream>> {
        let echo = self.echo;
        Box::pin(async move {
            if port == 1 {
                return Err(Error::unavailable("connection refused"));
            }
            TcpStream::connect(echo).await.map_err(Error::from)
        })
    }
}

async fn run(
    cmd: Vec<String>,
    mut stdin: DuplexStream,
    mut out: DuplexStream,
    mut err: DuplexStream,
    mut resize: mpsc::UnboundedReceiver<TerminalSize>,
) -> i32 {
    let arg = |i: usize| cmd.get(i).cloned().unwrap_or_default();
    match arg(0).as_str() {
        "echo" => {
            let _ = out
                .write_all(format!("{}\n", cmd[1..].join(" ")).as_bytes())
                .await;
            0
        }
        "exit" => arg(1).parse().unwrap_or(1),
        "cat" => {
            let _ = tokio::io::copy(&mut stdin, &mut out).await;
            0
        }
        "err" => {
            let _ = err.write_all(arg(1).as_bytes()).await;
            0
        }
        "big" => {
            let n: usize = arg(1).parse().unwrap_or(0);
            let _ = out.write_all(&pattern(n)).await;
            0
        }
        "size" => match resize.recv().await {
            Some(s) => {
                let _ = out
                    .write_all(format!("{} {}\n", s.height, s.width).as_bytes())
                    .await;
                0
            }
            None => 2,
        },
        "sleep" => {
            let mut b = [0u8; 1];
            // Until stdin ends or the session is dropped (the writer side goes away).
            let _ = stdin.read(&mut b).await;
            std::future::pending::<()>().await;
            0
        }
        _ => 127,
    }
}
