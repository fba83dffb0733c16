//! systemd's readiness protocol (sd_notify): `READY=1` once the CRI socket serves, `STOPPING=1` on shutdown.
//!
//! Under `Type=notify` systemd passes a datagram socket in `$NOTIFY_SOCKET` (a path, or an
//! abstract name written with a leading `@`) and considers the unit started only when
//! `READY=1` arrives: `systemctl start bosun` then returns once recovery is done and the
//! socket answers. The variable is taken out of the environment before anything is spawned:
//! runc treats a `NOTIFY_SOCKET` it inherits as the container's own and would hold
//! `runc start` until the container sent READY.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::PathBuf;

use crate::error::{Error, Result};

/// The environment variable systemd sets for `Type=notify` services.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// Where readiness goes: systemd's notification socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notifier {
    /// A socket in the filesystem.
    Path(PathBuf),
    /// A socket in the abstract namespace (`@name` in the variable).
    Abstract(Vec<u8>),
}

impl Notifier {
    /// Removes `$NOTIFY_SOCKET` from this process's environment and returns where it pointed
    /// (`None` when unset or empty: not started by systemd). Call it while the process is
    /// still single-threaded, before the async runtime starts.
    pub fn take_from_env() -> Option<Notifier> {
        let value = std::env::var_os(NOTIFY_SOCKET)?;
        std::env::remove_var(NOTIFY_SOCKET);
        Self::parse(&value.to_string_lossy())
    }

    /// The notifier for a `$NOTIFY_SOCKET` value.
    pub fn parse(value: &str) -> Option<Notifier> {
        match value.strip_prefix('@') {
            _ if value.is_empty() => None,
            Some(name) => Some(Notifier::Abstract(name.as_bytes().to_vec())),
            None => Some(Notifier::Path(PathBuf::from(value))),
        }
    }

    /// Sends one state update, e.g. `READY=1` (newline-separated `KEY=VALUE` lines).
    pub fn notify(&self, state: &str) -> Result<()> {
        let fail = |e: std::io::Error| Error::internal(format!("sd_notify {state:?}: {e}"));
        let socket = UnixDatagram::unbound().map_err(fail)?;
        let sent = match self {
            Notifier::Path(p) => socket.send_to(state.as_bytes(), p),
            Notifier::Abstract(name) => {
                let addr = SocketAddr::from_abstract_name(name).map_err(fail)?;
                socket.send_to_addr(state.as_bytes(), &addr)
            }
        };
        sent.map(drop).map_err(fail)
    }
}

/// Sends `state` when started by systemd; a failure is logged, never fatal (the daemon serves
/// either way, and systemd reports a unit that never became ready on its own).
pub fn send(notifier: Option<&Notifier>, state: &str) {
    if let Some(n) = notifier {
        match n.notify(state) {
            Ok(()) => tracing::debug!(state, "sd_notify sent"),
            Err(e) => tracing::warn!("{e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_name_a_path_or_an_abstract_socket() {
        assert_eq!(Notifier::parse(""), None);
        assert_eq!(
            Notifier::parse("/run/systemd/notify"),
            Some(Notifier::Path("/run/systemd/notify".into()))
        );
        assert_eq!(
            Notifier::parse("@/org/freedesktop/systemd1/notify/42"),
            Some(Notifier::Abstract(
                b"/org/freedesktop/systemd1/notify/42".to_vec()
            ))
        );
    }

    #[test]
    fn ready_reaches_a_path_socket() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).expect("bind");
        Notifier::Path(path).notify("READY=1").expect("notify");
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).expect("recv");
        assert_eq!(&buf[..n], b"READY=1");
    }

    #[test]
    fn ready_reaches_an_abstract_socket() {
        let name = format!("bosun-notify-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("addr");
        let listener = UnixDatagram::bind_addr(&addr).expect("bind");
        Notifier::parse(&format!("@{name}"))
            .expect("notifier")
            .notify("STOPPING=1")
            .expect("notify");
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).expect("recv");
        assert_eq!(&buf[..n], b"STOPPING=1");
    }

    #[test]
    fn a_missing_socket_is_an_error_naming_the_state() {
        let e = Notifier::Path("/nonexistent/notify".into())
            .notify("READY=1")
            .expect_err("no socket");
        assert!(e.to_string().contains("READY=1"), "{e}");
    }
}
