//! `[image]`: limits on what the image store accepts and fetches at once.

use serde::{Deserialize, Serialize};

/// Image store settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ImageConfig {
    /// Largest uncompressed layer accepted (bytes).
    pub max_layer_bytes: u64,
    /// Most tar entries accepted in one layer.
    pub max_layer_entries: u64,
    /// Layers downloaded at once per pull.
    pub max_concurrent_downloads: usize,
}

impl Default for ImageConfig {
    fn default() -> Self {
        ImageConfig {
            max_layer_bytes: 64 << 30,
            max_layer_entries: 2_000_000,
            max_concurrent_downloads: 3,
        }
    }
}
