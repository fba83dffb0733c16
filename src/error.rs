//! The crate's one error type: a kind (mapped once to a gRPC code) and a message naming the object.

use std::fmt;

/// What went wrong, independent of transport; `cri/` maps it to a gRPC code in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The caller sent something malformed (bad reference, missing field).
    InvalidArgument,
    /// The named object does not exist.
    NotFound,
    /// The object exists already (duplicate name).
    AlreadyExists,
    /// The object is not in a state that allows the call.
    FailedPrecondition,
    /// A remote (registry, plugin) could not be reached.
    Unavailable,
    /// The remote refused our credentials.
    PermissionDenied,
    /// The call ran out of time.
    DeadlineExceeded,
    /// A limit was hit (layer size, entry count).
    ResourceExhausted,
    /// A file system or disk quota is full (ENOSPC, EDQUOT): ResourceExhausted on the wire,
    /// told apart so that writers can name the file system and callers can tell a full disk
    /// from other limits.
    NoSpace,
    /// The RPC is not implemented by this runtime.
    Unimplemented,
    /// Anything else: I/O failures, corrupt state, bugs.
    Internal,
}

/// An error with its kind and a full, human-readable message chain (`step: cause: cause`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
    }
    /// InvalidArgument.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }
    /// NotFound.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }
    /// FailedPrecondition.
    pub fn precondition(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::FailedPrecondition, message)
    }
    /// Internal.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
    /// Unavailable.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }
    /// Unimplemented.
    pub fn unimplemented(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unimplemented, message)
    }
    /// The kind, for mapping to a transport code.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
    /// The message chain.
    pub fn message(&self) -> &str {
        &self.message
    }
    /// Prefixes the message with `ctx` (the step or object), keeping the kind.
    pub fn context(self, ctx: impl fmt::Display) -> Self {
        Error {
            kind: self.kind,
            message: format!("{ctx}: {}", self.message),
        }
    }
    /// The same message with another kind.
    pub fn with_kind(self, kind: ErrorKind) -> Self {
        Error {
            kind,
            message: self.message,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        if let Some(full) = no_space(&e) {
            return Error::new(ErrorKind::NoSpace, full);
        }
        let kind = match e.kind() {
            std::io::ErrorKind::NotFound => ErrorKind::NotFound,
            std::io::ErrorKind::TimedOut => ErrorKind::DeadlineExceeded,
            _ => ErrorKind::Internal,
        };
        Error::new(kind, e.to_string())
    }
}

/// What a full-disk error says (`no space left on device`, `disk quota exceeded`); None for
/// other errors. By kind too: wrappers such as the tar crate's keep the kind, not the errno.
pub fn no_space(e: &std::io::Error) -> Option<&'static str> {
    use std::io::ErrorKind as K;
    match (e.raw_os_error(), e.kind()) {
        (Some(libc::ENOSPC), _) | (_, K::StorageFull) => Some("no space left on device"),
        (Some(libc::EDQUOT), _) | (_, K::QuotaExceeded) => Some("disk quota exceeded"),
        _ => None,
    }
}

impl From<rustix::io::Errno> for Error {
    fn from(e: rustix::io::Errno) -> Self {
        Error::from(std::io::Error::from(e))
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::internal(e.to_string())
    }
}

/// The longest prefix of a caller's value that an error or log line echoes (issue 16 item 11:
/// a 64 KiB id came back whole and overflowed grpc-core's 16 KiB metadata limit).
pub const ECHO_MAX: usize = 256;

/// A value taken from a request, as errors and log lines echo it: at most [`ECHO_MAX`] bytes
/// (cut at a character boundary), then `…[N more bytes]` when cut. `{}` prints it as is,
/// `{:?}` quoted and escaped like `str`'s Debug. The one place every echo of input goes through.
#[derive(Clone, Copy)]
pub struct Echo<'a>(&'a str);

/// `s` as errors and log lines may echo it; see [`Echo`].
pub fn echo(s: &str) -> Echo<'_> {
    Echo(s)
}

impl Echo<'_> {
    /// The kept prefix and how many bytes were cut.
    fn parts(&self) -> (&str, usize) {
        prefix(self.0, ECHO_MAX)
    }

    fn cut_mark(f: &mut fmt::Formatter<'_>, cut: usize) -> fmt::Result {
        if cut > 0 {
            write!(f, "…[{cut} more bytes]")?;
        }
        Ok(())
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary, and
/// how many bytes it leaves out.
pub fn prefix(s: &str, max: usize) -> (&str, usize) {
    if s.len() <= max {
        return (s, 0);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (&s[..end], s.len() - end)
}

/// `s` cut to at most `max` bytes plus the `…[N more bytes]` mark (the whole of `s` when it
/// fits): for whole messages, where [`echo`] is for one value in them.
pub fn bounded(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    match prefix(s, max) {
        (all, 0) => std::borrow::Cow::Borrowed(all),
        (kept, cut) => std::borrow::Cow::Owned(format!("{kept}…[{cut} more bytes]")),
    }
}

impl fmt::Display for Echo<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kept, cut) = self.parts();
        f.write_str(kept)?;
        Self::cut_mark(f, cut)
    }
}

impl fmt::Debug for Echo<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kept, cut) = self.parts();
        write!(f, "{kept:?}")?;
        Self::cut_mark(f, cut)
    }
}

/// A path from a request, echoed like [`echo`] (lossy UTF-8).
pub fn echo_path(p: &std::path::Path) -> String {
    echo(&p.to_string_lossy()).to_string()
}

/// Adds context to any error convertible into [`Error`].
pub trait ResultExt<T> {
    /// On error, prefix the message with `ctx` (evaluated lazily).
    fn ctx<C: fmt::Display>(self, ctx: impl FnOnce() -> C) -> Result<T>;
}

impl<T, E: Into<Error>> ResultExt<T> for std::result::Result<T, E> {
    fn ctx<C: fmt::Display>(self, ctx: impl FnOnce() -> C) -> Result<T> {
        self.map_err(|e| e.into().context(ctx()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_prefixes_and_keeps_kind() {
        let e = Error::not_found("no such blob")
            .context("image busybox")
            .context("pull");
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert_eq!(e.to_string(), "pull: image busybox: no such blob");
    }

    #[test]
    fn echoes_are_cut_at_a_char_boundary_and_marked() {
        assert_eq!(echo("abc").to_string(), "abc");
        assert_eq!(format!("{:?}", echo("a\"b")), "\"a\\\"b\"");
        let long = "x".repeat(64 << 10);
        let shown = echo(&long).to_string();
        assert_eq!(
            shown.len(),
            ECHO_MAX + "…[65280 more bytes]".len(),
            "{shown}"
        );
        assert!(shown.ends_with("…[65280 more bytes]"), "{shown}");
        // 'é' is two bytes: byte ECHO_MAX falls inside one and the cut moves before it.
        let accents = format!("x{}", "é".repeat(300));
        let shown = format!("{:?}", echo(&accents));
        assert!(
            shown.starts_with("\"xéé") && shown.contains("\"…["),
            "{shown}"
        );
        let kept = shown.split('…').next().unwrap_or_default();
        assert!(kept.len() <= ECHO_MAX + 2, "{}", kept.len());
    }

    #[test]
    fn io_not_found_maps_to_not_found() {
        let e: Error = std::io::Error::from(std::io::ErrorKind::NotFound).into();
        assert_eq!(e.kind(), ErrorKind::NotFound);
    }

    #[test]
    fn full_disks_and_quotas_are_no_space_whatever_wraps_them() {
        let enospc: Error = std::io::Error::from_raw_os_error(libc::ENOSPC).into();
        assert_eq!(enospc.kind(), ErrorKind::NoSpace);
        assert_eq!(enospc.to_string(), "no space left on device");
        let edquot: Error = std::io::Error::from_raw_os_error(libc::EDQUOT).into();
        assert_eq!(edquot.kind(), ErrorKind::NoSpace);
        assert_eq!(edquot.to_string(), "disk quota exceeded");
        // The tar crate's errors: the kind kept, the errno gone.
        let wrapped = std::io::Error::new(std::io::ErrorKind::StorageFull, "failed to unpack");
        assert_eq!(Error::from(wrapped).kind(), ErrorKind::NoSpace);
        let other: Error = std::io::Error::from_raw_os_error(libc::EIO).into();
        assert_eq!(other.kind(), ErrorKind::Internal);
    }
}
