//! CNI results (0.1.0 … 1.0.0) and error objects: the pod's addresses, and what a failed plugin said.

use std::net::IpAddr;

use serde_json::Value;

use crate::config::cidr;
use crate::error::{Error, Result};

/// The pod's addresses from a final ADD result, IPv4 first (the kubelet takes the first as
/// the primary pod IP).
///
/// 0.3.0 and later: `ips[].address` (`10.1.2.3/16`); an entry whose `interface` index points
/// at a host-side interface (no `sandbox`) is skipped. 0.1.0/0.2.0: `ip4.ip` and `ip6.ip`.
pub fn pod_ips(result: &Value) -> Result<Vec<IpAddr>> {
    let bad = |what: &str| Error::internal(format!("CNI result: {what}: {result}"));
    let mut ips = Vec::new();
    if let Some(list) = result.get("ips") {
        let list = list
            .as_array()
            .ok_or_else(|| bad("\"ips\" is not a list"))?;
        let ifaces = result.get("interfaces").and_then(Value::as_array);
        for ip in list {
            let addr = ip
                .get("address")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("an ip without \"address\""))?;
            let host_side = ip
                .get("interface")
                .and_then(Value::as_u64)
                .and_then(|i| ifaces.and_then(|f| f.get(usize::try_from(i).ok()?)))
                .is_some_and(|iface| {
                    iface
                        .get("sandbox")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .is_empty()
                });
            if !host_side {
                ips.push(cidr::parse(addr).map_err(|e| bad(&e.to_string()))?.addr);
            }
        }
    } else {
        for key in ["ip4", "ip6"] {
            if let Some(ip) = result
                .get(key)
                .and_then(|v| v.get("ip"))
                .and_then(Value::as_str)
            {
                ips.push(cidr::parse(ip).map_err(|e| bad(&e.to_string()))?.addr);
            }
        }
    }
    ips.sort_by_key(|ip| ip.is_ipv6());
    ips.dedup();
    Ok(ips)
}

/// The message of a failed plugin: the CNI error object on stdout (`code`, `msg`,
/// `details`), else its stderr, else its exit status.
pub fn error_message(stdout: &[u8], stderr: &[u8], status: &str) -> String {
    if let Ok(v) = serde_json::from_slice::<Value>(stdout) {
        let msg = v.get("msg").and_then(Value::as_str).unwrap_or_default();
        if !msg.is_empty() {
            let code = v.get("code").and_then(Value::as_u64).unwrap_or(0);
            return match v.get("details").and_then(Value::as_str) {
                Some(d) if !d.is_empty() => format!("{msg}: {d} (code {code})"),
                _ => format!("{msg} (code {code})"),
            };
        }
    }
    let err = String::from_utf8_lossy(stderr);
    let out = String::from_utf8_lossy(stdout);
    match (err.trim(), out.trim()) {
        ("", "") => status.to_string(),
        ("", o) => format!("{status}: {o}"),
        (e, _) => format!("{status}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn result_1_0_0_keeps_sandbox_addresses_v4_first() {
        let r = json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": "bosun0", "mac": "aa:bb:cc:dd:ee:ff"},
                {"name": "veth1", "mac": "aa:bb:cc:dd:ee:01"},
                {"name": "eth0", "mac": "aa:bb:cc:dd:ee:02", "sandbox": "/run/netns/x"}
            ],
            "ips": [
                {"interface": 2, "address": "fd86::5/64", "gateway": "fd86::1"},
                {"interface": 2, "address": "10.86.0.5/16", "gateway": "10.86.0.1"},
                {"interface": 0, "address": "10.86.0.1/16"}
            ],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dns": {}
        });
        let ips: Vec<String> = pod_ips(&r)
            .expect("ips")
            .iter()
            .map(|i| i.to_string())
            .collect();
        assert_eq!(ips, ["10.86.0.5", "fd86::5"]);
    }

    #[test]
    fn result_0_4_0_with_version_fields_and_0_2_0_ip4() {
        let r = json!({
            "cniVersion": "0.4.0",
            "ips": [{"version": "4", "address": "10.1.0.7/24", "gateway": "10.1.0.1"}]
        });
        assert_eq!(
            pod_ips(&r).expect("ips"),
            ["10.1.0.7".parse::<IpAddr>().expect("ip")]
        );
        let r = json!({"cniVersion": "0.2.0", "ip4": {"ip": "10.2.0.3/16"}, "ip6": {"ip": "fd02::3/64"}});
        assert_eq!(pod_ips(&r).expect("ips").len(), 2);
        assert!(pod_ips(&json!({"ips": [{"address": "nonsense"}]})).is_err());
        assert!(pod_ips(&json!({})).expect("none").is_empty());
    }

    #[test]
    fn error_object_beats_stderr() {
        let out = br#"{"cniVersion":"1.0.0","code":11,"msg":"failed to allocate","details":"range full"}"#;
        assert_eq!(
            error_message(out, b"noise", "exit status 1"),
            "failed to allocate: range full (code 11)"
        );
        assert_eq!(
            error_message(b"", b"boom\n", "exit status 2"),
            "exit status 2: boom"
        );
        assert_eq!(error_message(b"", b"", "exit status 3"), "exit status 3");
    }
}
