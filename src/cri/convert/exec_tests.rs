//! Tests of ExecSync's arguments and answer.

use std::time::Duration;

use super::assert_invalid;
use super::exec::*;
use crate::oci::ExecOutput;

#[test]
fn timeouts() {
    let cmd = || vec!["true".to_string()];
    assert_eq!(
        exec_args(cmd(), 0).expect("valid").1,
        None,
        "0: no deadline"
    );
    assert_eq!(
        exec_args(cmd(), 5).expect("valid"),
        (cmd(), Some(Duration::from_secs(5)))
    );
    assert_invalid(exec_args(cmd(), -1), &["timeout", "-1"]);
    assert_invalid(exec_args(Vec::new(), 1), &["cmd is required"]);
}

#[test]
fn output_is_carried_with_a_non_zero_exit() {
    let r = exec_response(ExecOutput {
        exit_code: 3,
        stdout: b"out".to_vec(),
        stderr: vec![0xfe],
        timed_out: false,
    });
    assert_eq!(r.exit_code, 3);
    assert_eq!(r.stdout, b"out");
    assert_eq!(r.stderr, [0xfe]);
}
