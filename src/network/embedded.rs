//! bosun's embedded default network, used when the conf dir holds no config: loopback on `lo`,
//! then bridge + host-local IPAM + portmap on eth0 (Debian's containernetworking-plugins).

use serde_json::{json, Value};

use super::cidr;
use super::conf::NetworkList;
use crate::config::NetworkConfig;
use crate::error::Result;

/// The CNI version the embedded lists are written in.
pub const CNI_VERSION: &str = "1.0.0";

/// The loopback network (run with CNI_IFNAME=lo before the pod network, as containerd does).
pub fn loopback() -> Result<NetworkList> {
    NetworkList::from_raw(&json!({
        "cniVersion": CNI_VERSION,
        "name": "cni-loopback",
        "plugins": [{"type": "loopback"}]
    }))
}

/// The pod network from `cfg`; `pod_cidr` (UpdateRuntimeConfig), when set, replaces
/// `cfg.subnet`. One host-local range per subnet: an IPv4 and an IPv6 subnet give pods both.
pub fn pod_network(cfg: &NetworkConfig, pod_cidr: Option<&str>) -> Result<NetworkList> {
    let subnets = pod_cidr.unwrap_or(&cfg.subnet);
    let subnets = cidr::parse_list(subnets).map_err(|e| {
        e.context(match pod_cidr {
            Some(_) => "pod CIDR from UpdateRuntimeConfig",
            None => "config network.subnet",
        })
    })?;
    let ranges: Vec<Value> = subnets
        .iter()
        .map(|s| json!([{"subnet": s.to_string()}]))
        .collect();
    NetworkList::from_raw(&json!({
        "cniVersion": CNI_VERSION,
        "name": cfg.name,
        "plugins": [
            {
                "type": "bridge",
                "bridge": cfg.bridge,
                "isGateway": true,
                "isDefaultGateway": cfg.default_route,
                "ipMasq": cfg.masquerade,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": ranges,
                    "dataDir": cfg.data_dir,
                }
            },
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_config_keys_and_prefers_the_pod_cidr() {
        let cfg = NetworkConfig {
            bridge: "bt1".into(),
            subnet: "10.77.0.0/24".into(),
            masquerade: false,
            default_route: false,
            data_dir: "/tmp/ipam".into(),
            ..NetworkConfig::default()
        };
        let l = pod_network(&cfg, None).expect("list");
        assert_eq!(l.name, "bosun");
        let bridge = &l.plugins[0];
        assert_eq!(bridge["bridge"], "bt1");
        assert_eq!(bridge["ipMasq"], false);
        assert_eq!(bridge["isDefaultGateway"], false);
        assert_eq!(bridge["ipam"]["dataDir"], "/tmp/ipam");
        assert_eq!(
            bridge["ipam"]["ranges"],
            json!([[{"subnet": "10.77.0.0/24"}]])
        );
        assert_eq!(l.plugin_type(1), "portmap");
        assert_eq!(l.plugins[1]["capabilities"]["portMappings"], true);
        let l = pod_network(&cfg, Some("10.5.0.0/24,fd05::/64")).expect("dual");
        assert_eq!(
            l.plugins[0]["ipam"]["ranges"],
            json!([[{"subnet": "10.5.0.0/24"}], [{"subnet": "fd05::/64"}]])
        );
        let defaults = pod_network(&NetworkConfig::default(), None).expect("defaults");
        assert_eq!(defaults.plugins[0]["ipMasq"], true);
        assert_eq!(defaults.plugins[0]["bridge"], "bosun0");
        let e = pod_network(
            &NetworkConfig {
                subnet: "nope".into(),
                ..cfg
            },
            None,
        )
        .expect_err("bad");
        assert!(e.to_string().contains("network.subnet"), "{e}");
        assert_eq!(loopback().expect("lo").plugin_type(0), "loopback");
    }
}
