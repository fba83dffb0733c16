//! Thin, audited OS edges that need `unsafe` (DESIGN rule 4): child spawning set-up and
//! process descriptors, the new mount API, giving memory back.
//!
//! Every `unsafe` block here carries a `// SAFETY:` line; the rest of the daemon stays
//! `#![deny(unsafe_code)]`.
#![allow(unsafe_code)]

pub mod async_fd;
pub mod mount_api;
pub mod pidfd;
pub mod spawn;
pub mod trim;
pub mod vfork;

pub use pidfd::PidFd;
pub use spawn::CommandExt;
