//! On-disk state primitives shared by every store: atomic file replacement, directory sync, and full file systems named in errors.

pub mod atomic;
pub mod space;
