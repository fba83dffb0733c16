//! Which transport and subprotocol a client asked for: the SPDY upgrade with `X-Stream-Protocol-Version`, or WebSocket with `Sec-WebSocket-Protocol`.

use http::HeaderMap;

/// SPDY/3.1 upgrade token.
pub const SPDY_UPGRADE: &str = "SPDY/3.1";
/// The header carrying the remotecommand/portforward version on a SPDY upgrade.
pub const PROTOCOL_HEADER: &str = "X-Stream-Protocol-Version";
/// The header listing what the server accepts when negotiation fails.
pub const ACCEPTED_HEADER: &str = "X-Accepted-Stream-Protocol-Versions";
/// portforward's (only) version.
pub const PORT_FORWARD_V1: &str = "portforward.k8s.io";
/// WebSocket subprotocol for port-forward tunnelled as SPDY over WebSocket (client-go ≥ 1.30).
pub const SPDY_TUNNEL_PORT_FORWARD: &str = "SPDY/3.1+portforward.k8s.io";

/// remotecommand versions over SPDY, newest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    /// `channel.k8s.io`.
    V1,
    /// `v2.channel.k8s.io`: stderr dropped with a TTY, error stream fixed.
    V2,
    /// `v3.channel.k8s.io`: adds the resize stream.
    V3,
    /// `v4.channel.k8s.io`: the error stream carries a JSON Status with the exit code.
    V4,
    /// `v5.channel.k8s.io` (WebSocket only): adds the channel-close signal.
    V5,
}

impl Version {
    /// The subprotocol name.
    pub fn name(self) -> &'static str {
        match self {
            Version::V1 => "channel.k8s.io",
            Version::V2 => "v2.channel.k8s.io",
            Version::V3 => "v3.channel.k8s.io",
            Version::V4 => "v4.channel.k8s.io",
            Version::V5 => "v5.channel.k8s.io",
        }
    }
    /// Whether the error stream carries a JSON Status.
    pub fn json_status(self) -> bool {
        self >= Version::V4
    }
    /// Whether resizes are carried.
    pub fn resizes(self) -> bool {
        self >= Version::V3
    }
}

/// remotecommand versions served over SPDY, in server preference order.
pub const SPDY_EXEC: [Version; 4] = [Version::V4, Version::V3, Version::V2, Version::V1];

/// A WebSocket channel protocol: its remotecommand version and whether frames are base64 text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WsProtocol {
    /// The negotiated name ("" when the client offered none).
    pub name: &'static str,
    /// V1 (channel.k8s.io and ""), V4 or V5.
    pub version: Version,
    /// Text frames: a digit channel then base64 data.
    pub base64: bool,
}

const WS_EXEC: [WsProtocol; 5] = [
    WsProtocol {
        name: "v5.channel.k8s.io",
        version: Version::V5,
        base64: false,
    },
    WsProtocol {
        name: "v4.channel.k8s.io",
        version: Version::V4,
        base64: false,
    },
    WsProtocol {
        name: "v4.base64.channel.k8s.io",
        version: Version::V4,
        base64: true,
    },
    WsProtocol {
        name: "channel.k8s.io",
        version: Version::V1,
        base64: false,
    },
    WsProtocol {
        name: "base64.channel.k8s.io",
        version: Version::V1,
        base64: true,
    },
];

const WS_DEFAULT: WsProtocol = WsProtocol {
    name: "",
    version: Version::V1,
    base64: false,
};

/// Every value of header `name`, comma lists split and trimmed.
pub fn values(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect()
}

/// Whether the request asks for a WebSocket upgrade.
pub fn is_websocket(headers: &HeaderMap) -> bool {
    values(headers, "upgrade")
        .iter()
        .any(|v| v.eq_ignore_ascii_case("websocket"))
        && values(headers, "connection")
            .iter()
            .any(|v| v.eq_ignore_ascii_case("upgrade"))
}

/// Whether the request asks for a SPDY/3.1 upgrade.
pub fn is_spdy(headers: &HeaderMap) -> bool {
    values(headers, "upgrade")
        .iter()
        .any(|v| v.eq_ignore_ascii_case(SPDY_UPGRADE))
        && values(headers, "connection")
            .iter()
            .any(|v| v.eq_ignore_ascii_case("upgrade"))
}

/// Why a negotiation failed: the HTTP status to answer and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub message: String,
}

/// The first remotecommand version the SPDY client offers that we serve (client order wins,
/// as in apimachinery's httpstream.Handshake).
pub fn spdy_exec(headers: &HeaderMap) -> Result<Version, Refusal> {
    let offered = values(headers, PROTOCOL_HEADER);
    if offered.is_empty() {
        return Err(Refusal {
            status: 400,
            message: format!("unable to upgrade: {PROTOCOL_HEADER} is required"),
        });
    }
    offered
        .iter()
        .find_map(|o| SPDY_EXEC.iter().find(|v| v.name() == o).copied())
        .ok_or_else(|| Refusal {
            status: 403,
            message: format!("unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server accepts {:?}", SPDY_EXEC.map(Version::name)),
        })
}

/// portforward over SPDY: the client must offer `portforward.k8s.io`.
pub fn spdy_port_forward(headers: &HeaderMap) -> Result<&'static str, Refusal> {
    let offered = values(headers, PROTOCOL_HEADER);
    if offered.is_empty() {
        return Err(Refusal {
            status: 400,
            message: format!("unable to upgrade: {PROTOCOL_HEADER} is required"),
        });
    }
    if offered.iter().any(|o| o == PORT_FORWARD_V1) {
        Ok(PORT_FORWARD_V1)
    } else {
        Err(Refusal {
            status: 403,
            message: format!("unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server accepts [\"{PORT_FORWARD_V1}\"]"),
        })
    }
}

/// The first WebSocket channel protocol the client offers that we serve; none offered means
/// the unnamed binary v1 protocol.
pub fn ws_exec(headers: &HeaderMap) -> Result<WsProtocol, Refusal> {
    ws_pick(headers, &WS_EXEC)
}

/// Port-forward over WebSocket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WsPortForward {
    /// kubelet's wsstream channel pairs (data, error) per port.
    Channels(WsProtocol),
    /// SPDY framing carried in binary WebSocket messages (client-go's tunnelling dialer).
    SpdyTunnel,
}

/// What a WebSocket port-forward client offers, tunnelled SPDY first.
pub fn ws_port_forward(headers: &HeaderMap) -> Result<WsPortForward, Refusal> {
    let offered = values(headers, "sec-websocket-protocol");
    if offered.iter().any(|o| o == SPDY_TUNNEL_PORT_FORWARD) {
        return Ok(WsPortForward::SpdyTunnel);
    }
    let channels = [WS_EXEC[1], WS_EXEC[2], WS_EXEC[3], WS_EXEC[4]];
    ws_pick(headers, &channels).map(WsPortForward::Channels)
}

fn ws_pick(headers: &HeaderMap, served: &[WsProtocol]) -> Result<WsProtocol, Refusal> {
    let offered = values(headers, "sec-websocket-protocol");
    if offered.is_empty() {
        return Ok(WS_DEFAULT);
    }
    offered
        .iter()
        .find_map(|o| served.iter().find(|p| p.name == o).copied())
        .ok_or_else(|| Refusal {
            status: 400,
            message: format!(
                "requested protocol(s) are not supported: {offered:?}; supports {:?}",
                served.iter().map(|p| p.name).collect::<Vec<_>>()
            ),
        })
}

/// The `Sec-WebSocket-Accept` answer to the client's key, or a refusal when it is missing.
pub fn ws_accept(headers: &HeaderMap) -> Result<String, Refusal> {
    let key = headers.get("sec-websocket-key").ok_or_else(|| Refusal {
        status: 400,
        message: "websocket upgrade without Sec-WebSocket-Key".into(),
    })?;
    if headers
        .get("sec-websocket-version")
        .and_then(|v| v.to_str().ok())
        != Some("13")
    {
        return Err(Refusal {
            status: 400,
            message: "websocket upgrade: Sec-WebSocket-Version must be 13".into(),
        });
    }
    Ok(tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(*k, http::HeaderValue::from_static(v));
        }
        m
    }

    #[test]
    fn spdy_picks_the_clients_first_served_version() {
        let m = h(&[
            ("X-Stream-Protocol-Version", "v5.channel.k8s.io"),
            ("X-Stream-Protocol-Version", "v4.channel.k8s.io"),
            ("X-Stream-Protocol-Version", "v3.channel.k8s.io"),
        ]);
        assert_eq!(spdy_exec(&m), Ok(Version::V4));
        let m = h(&[(
            "X-Stream-Protocol-Version",
            "v2.channel.k8s.io, channel.k8s.io",
        )]);
        assert_eq!(spdy_exec(&m), Ok(Version::V2));
        assert_eq!(spdy_exec(&h(&[])).map_err(|r| r.status), Err(400));
        let m = h(&[("X-Stream-Protocol-Version", "v9")]);
        assert_eq!(spdy_exec(&m).map_err(|r| r.status), Err(403));
        let m = h(&[("X-Stream-Protocol-Version", "portforward.k8s.io")]);
        assert_eq!(spdy_port_forward(&m), Ok(PORT_FORWARD_V1));
    }

    #[test]
    fn websocket_protocols() {
        let m = h(&[(
            "Sec-WebSocket-Protocol",
            "v5.channel.k8s.io, v4.channel.k8s.io",
        )]);
        assert_eq!(ws_exec(&m).map(|p| p.version), Ok(Version::V5));
        let m = h(&[("Sec-WebSocket-Protocol", "v4.base64.channel.k8s.io")]);
        assert!(ws_exec(&m).is_ok_and(|p| p.base64 && p.version == Version::V4));
        assert_eq!(ws_exec(&h(&[])), Ok(WS_DEFAULT));
        let m = h(&[("Sec-WebSocket-Protocol", "nope")]);
        assert_eq!(ws_exec(&m).map_err(|r| r.status), Err(400));
        let m = h(&[("Sec-WebSocket-Protocol", SPDY_TUNNEL_PORT_FORWARD)]);
        assert_eq!(ws_port_forward(&m), Ok(WsPortForward::SpdyTunnel));
        let m = h(&[
            ("Upgrade", "websocket"),
            ("Connection", "keep-alive, Upgrade"),
        ]);
        assert!(is_websocket(&m) && !is_spdy(&m));
        let m = h(&[("Upgrade", "SPDY/3.1"), ("Connection", "Upgrade")]);
        assert!(is_spdy(&m));
    }
}
