//! Images: content store, registry pulls, archive import, layer unpacking and the image index.

pub mod content;
pub mod digest;
pub mod import;
pub mod index;
pub mod leases;
pub mod manifest;
pub mod pull;
pub mod reference;
pub mod registry;
pub mod service;
pub mod snapshot;
pub(crate) mod tasks;
pub mod unpack;
pub mod usage;
