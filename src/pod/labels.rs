//! The kubelet's label and annotation keys on sandboxes and containers, plus bosun's own markers.

/// Pod name label on sandboxes and containers.
pub const POD_NAME: &str = "io.kubernetes.pod.name";
/// Pod namespace label on sandboxes and containers.
pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
/// Pod UID label on sandboxes and containers.
pub const POD_UID: &str = "io.kubernetes.pod.uid";
/// Container name label on containers.
pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
/// Annotation: hash of the container spec (restart on change).
pub const CONTAINER_HASH: &str = "io.kubernetes.container.hash";
/// Annotation: the container's restart count.
pub const CONTAINER_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
/// Annotation: the in-container termination message path.
pub const TERMINATION_MESSAGE_PATH: &str = "io.kubernetes.container.terminationMessagePath";
/// Annotation: the termination message policy (File or FallbackToLogsOnError).
pub const TERMINATION_MESSAGE_POLICY: &str = "io.kubernetes.container.terminationMessagePolicy";
/// Annotation: the pod's termination grace period in seconds.
pub const POD_TERMINATION_GRACE_PERIOD: &str = "io.kubernetes.pod.terminationGracePeriod";
/// Annotation: the container's ports as JSON.
pub const CONTAINER_PORTS: &str = "io.kubernetes.container.ports";
/// Annotation: the container's preStop handler as JSON.
pub const CONTAINER_PRE_STOP_HANDLER: &str = "io.kubernetes.container.preStopHandler";
/// Sandbox annotation: where the pod came from (`api` or `file`).
pub const CONFIG_SOURCE: &str = "kubernetes.io/config.source";
/// Sandbox annotation: when the pod was first seen (RFC 3339).
pub const CONFIG_SEEN: &str = "kubernetes.io/config.seen";
/// bosun's marker on every sandbox and container the supervisor makes; value [`SUPERVISED_VALUE`].
pub const SUPERVISED: &str = "io.bosun.pod.supervised";
/// The value of [`SUPERVISED`].
pub const SUPERVISED_VALUE: &str = "true";
/// bosun's label naming a container's kind: `init`, `sidecar` or `app`.
pub const CONTAINER_KIND: &str = "io.bosun.container.kind";

/// Whether a sandbox's or container's labels carry bosun's supervisor marker.
pub fn is_supervised(labels: &std::collections::HashMap<String, String>) -> bool {
    labels.get(SUPERVISED).map(String::as_str) == Some(SUPERVISED_VALUE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn supervised_marker_needs_exact_value() {
        let mut labels = HashMap::new();
        assert!(!is_supervised(&labels));
        labels.insert(SUPERVISED.to_string(), "false".to_string());
        assert!(!is_supervised(&labels));
        labels.insert(SUPERVISED.to_string(), SUPERVISED_VALUE.to_string());
        assert!(is_supervised(&labels));
    }

    #[test]
    fn kubelet_keys_match_the_kubelet() {
        assert_eq!(POD_NAME, "io.kubernetes.pod.name");
        assert_eq!(
            CONTAINER_RESTART_COUNT,
            "io.kubernetes.container.restartCount"
        );
        assert_eq!(CONFIG_SOURCE, "kubernetes.io/config.source");
    }
}
