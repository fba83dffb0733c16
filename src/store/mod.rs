//! On-disk state primitives shared by every store: atomic file replacement and directory sync.

pub mod atomic;
