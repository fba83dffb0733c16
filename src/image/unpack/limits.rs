//! Resource limits while unpacking: entry and byte budgets, and a cap on per-member header bytes.

use std::cell::Cell;
use std::io::{self, Read};
use std::rc::Rc;

use crate::error::{Error, ErrorKind, Result};
use crate::image::snapshot::UnpackLimits;

/// The most bytes the headers of one member may take: its ustar header, PAX records, GNU long
/// name and link, and the padding of the member before it.
///
/// The tar crate reads PAX records and long names into memory whole, so without this cap a
/// hostile `x` header claiming gigabytes would be an allocation bomb. Real PAX headers carry a
/// few xattrs (each at most 64 KiB on Linux) and a path of at most a few KiB.
pub(crate) const MAX_HEADER_BYTES: u64 = 1 << 20;

/// Counts members and content bytes against [`UnpackLimits`].
#[derive(Debug)]
pub(crate) struct Budget {
    max_entries: u64,
    max_bytes: u64,
    /// Members seen so far.
    pub(crate) entries: u64,
    /// Sum of member sizes seen so far.
    pub(crate) bytes: u64,
}

impl Budget {
    /// A fresh budget for one layer.
    pub(crate) fn new(limits: &UnpackLimits) -> Self {
        Budget {
            max_entries: limits.max_entries,
            max_bytes: limits.max_layer_bytes,
            entries: 0,
            bytes: 0,
        }
    }

    /// Charges one member of `size` bytes; over either limit is ResourceExhausted.
    pub(crate) fn admit(&mut self, size: u64) -> Result<()> {
        self.entries += 1;
        if self.entries > self.max_entries {
            return Err(exhausted(format!(
                "layer has more than {} entries",
                self.max_entries
            )));
        }
        self.bytes = self.bytes.saturating_add(size);
        if self.bytes > self.max_bytes {
            return Err(exhausted(format!(
                "layer content exceeds {} bytes",
                self.max_bytes
            )));
        }
        Ok(())
    }
}

/// A ResourceExhausted error.
pub(crate) fn exhausted(message: String) -> Error {
    Error::new(ErrorKind::ResourceExhausted, message)
}

/// Shared switch between the apply loop and [`HeaderGuard`]: while armed, reads are limited.
#[derive(Debug, Default)]
pub(crate) struct GuardSwitch {
    left: Cell<Option<u64>>,
    tripped: Cell<bool>,
}

impl GuardSwitch {
    /// Limits the following reads to [`MAX_HEADER_BYTES`] (call before asking for the next member).
    pub(crate) fn arm(&self) {
        self.left.set(Some(MAX_HEADER_BYTES));
    }

    /// Lifts the limit (member data is charged to the [`Budget`] instead).
    pub(crate) fn disarm(&self) {
        self.left.set(None);
    }

    /// Whether a read was refused because the header cap was hit.
    pub(crate) fn tripped(&self) -> bool {
        self.tripped.get()
    }
}

/// A reader that refuses to deliver more than [`MAX_HEADER_BYTES`] while its switch is armed.
#[derive(Debug)]
pub(crate) struct HeaderGuard<R> {
    inner: R,
    switch: Rc<GuardSwitch>,
}

impl<R: Read> HeaderGuard<R> {
    /// Wraps `inner`; the returned switch arms and disarms the cap.
    pub(crate) fn new(inner: R) -> (Self, Rc<GuardSwitch>) {
        let switch = Rc::new(GuardSwitch::default());
        (
            HeaderGuard {
                inner,
                switch: Rc::clone(&switch),
            },
            switch,
        )
    }

    /// Reads and discards the rest of the stream (trailing zero blocks and record padding) so a
    /// hashing reader below sees every byte; more than `max` bytes is ResourceExhausted.
    pub(crate) fn drain(mut self, max: u64) -> Result<()> {
        self.switch.disarm();
        let n = io::copy(
            &mut (&mut self.inner).take(max.saturating_add(1)),
            &mut io::sink(),
        )
        .map_err(|e| Error::invalid(format!("read past the end of the archive: {e}")))?;
        if n > max {
            return Err(exhausted(format!(
                "more than {max} bytes after the end of the archive"
            )));
        }
        Ok(())
    }
}

impl<R: Read> Read for HeaderGuard<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(left) = self.switch.left.get() else {
            return self.inner.read(buf);
        };
        if left == 0 && !buf.is_empty() {
            self.switch.tripped.set(true);
            return Err(io::Error::other(format!(
                "member headers exceed {MAX_HEADER_BYTES} bytes"
            )));
        }
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.switch.left.set(Some(left - n as u64));
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_counts_entries_and_bytes() {
        let limits = UnpackLimits {
            max_layer_bytes: 10,
            max_entries: 2,
            max_path_len: 10,
        };
        let mut b = Budget::new(&limits);
        b.admit(4).expect("first");
        b.admit(6).expect("second");
        let err = b.admit(0).expect_err("third entry");
        assert_eq!(err.kind(), ErrorKind::ResourceExhausted);
        let mut b = Budget::new(&limits);
        let err = b.admit(11).expect_err("too big");
        assert_eq!(err.kind(), ErrorKind::ResourceExhausted);
    }

    #[test]
    fn guard_limits_only_while_armed() {
        let data = vec![0u8; (MAX_HEADER_BYTES as usize) + 10];
        let (mut g, switch) = HeaderGuard::new(&data[..]);
        switch.arm();
        let mut sink = Vec::new();
        assert!(g.read_to_end(&mut sink).is_err());
        assert!(switch.tripped());
        switch.disarm();
        let mut rest = Vec::new();
        g.read_to_end(&mut rest).expect("disarmed");
        assert_eq!(sink.len() + rest.len(), data.len());
    }
}
