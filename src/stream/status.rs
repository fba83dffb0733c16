//! The error stream's payload: a metav1.Status JSON (v4+) or a bare message (v1–v3), and its parsing.

use serde::{Deserialize, Serialize};

use crate::runtime::SessionEnd;

/// The outcome of a remotecommand session as the error stream reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The command exited 0 (or an attach ended).
    Success,
    /// The command exited with this non-zero code.
    ExitCode(i32),
    /// The session could not run; the message says why.
    Failed(String),
}

impl Outcome {
    /// The outcome of an exec that ended with `end`.
    pub fn of_exec(end: &SessionEnd) -> Outcome {
        match end {
            SessionEnd::Exited(0) | SessionEnd::Detached => Outcome::Success,
            SessionEnd::Exited(code) => Outcome::ExitCode(*code),
        }
    }
}

/// metav1.Status, the fields remotecommand uses.
#[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    #[serde(default)]
    pub metadata: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    pub status: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Details>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub code: i32,
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}

/// metav1.StatusDetails, causes only.
#[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Details {
    #[serde(default)]
    pub causes: Vec<Cause>,
}

/// metav1.StatusCause.
#[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Cause {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// The human message of a failed outcome, as the kubelet words it.
fn message(o: &Outcome) -> String {
    match o {
        Outcome::Success => String::new(),
        Outcome::ExitCode(c) => {
            format!("command terminated with non-zero exit code: exit status {c}")
        }
        Outcome::Failed(m) => m.clone(),
    }
}

/// The v4+ error stream payload: always a Status JSON.
pub fn v4_payload(o: &Outcome) -> Vec<u8> {
    let s = match o {
        Outcome::Success => Status {
            status: "Success".into(),
            ..Default::default()
        },
        Outcome::ExitCode(c) => Status {
            status: "Failure".into(),
            message: message(o),
            reason: "NonZeroExitCode".into(),
            details: Some(Details {
                causes: vec![Cause {
                    reason: "ExitCode".into(),
                    message: c.to_string(),
                }],
            }),
            ..Default::default()
        },
        Outcome::Failed(m) => Status {
            status: "Failure".into(),
            message: m.clone(),
            reason: "InternalError".into(),
            details: Some(Details {
                causes: vec![Cause {
                    reason: String::new(),
                    message: m.clone(),
                }],
            }),
            code: 500,
            ..Default::default()
        },
    };
    serde_json::to_vec(&s).unwrap_or_default()
}

/// The v1–v3 error stream payload: nothing on success, the message otherwise.
pub fn v1_payload(o: &Outcome) -> Vec<u8> {
    message(o).into_bytes()
}

/// What a client makes of the error stream's bytes (empty = success).
pub fn parse(payload: &[u8], v4: bool) -> Outcome {
    if payload.is_empty() {
        return Outcome::Success;
    }
    if !v4 {
        return Outcome::Failed(String::from_utf8_lossy(payload).into_owned());
    }
    let s: Status = match serde_json::from_slice(payload) {
        Ok(s) => s,
        Err(e) => return Outcome::Failed(format!("error stream: bad status: {e}")),
    };
    if s.status == "Success" {
        return Outcome::Success;
    }
    if s.reason == "NonZeroExitCode" {
        let code = s
            .details
            .iter()
            .flat_map(|d| d.causes.iter())
            .find(|c| c.reason == "ExitCode")
            .and_then(|c| c.message.parse().ok());
        if let Some(code) = code {
            return Outcome::ExitCode(code);
        }
    }
    Outcome::Failed(s.message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_round_trip_as_kubelet_status() {
        let p = v4_payload(&Outcome::ExitCode(3));
        let v: serde_json::Value = serde_json::from_slice(&p).expect("json");
        assert_eq!(v["status"], "Failure");
        assert_eq!(v["reason"], "NonZeroExitCode");
        assert_eq!(v["details"]["causes"][0]["reason"], "ExitCode");
        assert_eq!(v["details"]["causes"][0]["message"], "3");
        assert_eq!(parse(&p, true), Outcome::ExitCode(3));
        let ok = v4_payload(&Outcome::Success);
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&ok).expect("json")["status"],
            "Success"
        );
        assert_eq!(parse(&ok, true), Outcome::Success);
        let f = v4_payload(&Outcome::Failed("boom".into()));
        assert_eq!(parse(&f, true), Outcome::Failed("boom".into()));
    }

    #[test]
    fn old_protocols_send_only_failures() {
        assert!(v1_payload(&Outcome::Success).is_empty());
        assert_eq!(parse(b"", false), Outcome::Success);
        let m = v1_payload(&Outcome::ExitCode(2));
        assert!(matches!(parse(&m, false), Outcome::Failed(s) if s.contains("exit status 2")));
    }
}
