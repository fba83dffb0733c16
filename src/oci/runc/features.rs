//! The OCI runtime's `features` command, asked once at start: the mount extensions (`rro`, ID-mapped mounts) it applies itself.

use std::path::Path;
use std::process::{Command, Stdio};

/// Mount extensions the OCI runtime applies itself (runc 1.2 and later).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuntimeMountFeatures {
    /// The `rro` mount option (recursive read-only).
    pub rro: bool,
    /// ID-mapped bind mounts (`ridmap` with mount `uidMappings`/`gidMappings`).
    pub idmap: bool,
}

/// Reads `runc features` output: `rro` among `mountOptions`, and
/// `linux.mountExtensions.idmap.enabled` with `ridmap` among them. Anything unreadable means
/// no extension (runc 1.1 reports neither).
pub fn parse_runtime_features(json: &[u8]) -> RuntimeMountFeatures {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(json) else {
        return RuntimeMountFeatures::default();
    };
    let option = |name: &str| {
        v["mountOptions"]
            .as_array()
            .is_some_and(|opts| opts.iter().any(|o| o.as_str() == Some(name)))
    };
    let idmap = v["linux"]["mountExtensions"]["idmap"]["enabled"].as_bool() == Some(true);
    RuntimeMountFeatures {
        rro: option("rro"),
        idmap: idmap && option("ridmap"),
    }
}

/// Runs `<runtime> features`; a runtime without the command (or failing) has no extension.
pub fn runtime_features(runtime: &Path) -> RuntimeMountFeatures {
    match Command::new(runtime)
        .arg("features")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => parse_runtime_features(&out.stdout),
        Ok(out) => {
            tracing::debug!(status = %out.status, "{} features failed", runtime.display());
            RuntimeMountFeatures::default()
        }
        Err(e) => {
            tracing::debug!("{} features: {e}", runtime.display());
            RuntimeMountFeatures::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runc_1_1_has_no_mount_extensions() {
        let json = br#"{"ociVersionMin":"1.0.0","mountOptions":["bind","rbind","ro"],
            "linux":{"namespaces":["user"]}}"#;
        assert_eq!(
            parse_runtime_features(json),
            RuntimeMountFeatures::default()
        );
        assert_eq!(parse_runtime_features(b"not json"), Default::default());
    }

    #[test]
    fn runc_1_2_has_rro_and_idmap() {
        let json = br#"{"mountOptions":["bind","rro","idmap","ridmap"],
            "linux":{"mountExtensions":{"idmap":{"enabled":true}}}}"#;
        assert_eq!(
            parse_runtime_features(json),
            RuntimeMountFeatures {
                rro: true,
                idmap: true
            }
        );
        let disabled = br#"{"mountOptions":["rro","ridmap"],
            "linux":{"mountExtensions":{"idmap":{"enabled":false}}}}"#;
        assert!(!parse_runtime_features(disabled).idmap);
    }
}
