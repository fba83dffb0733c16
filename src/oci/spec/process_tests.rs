//! Unit tests for argv, environment, cwd and OOM score rules.

use super::*;
use crate::error::ErrorKind;

fn v(s: &[&str]) -> Vec<String> {
    s.iter().map(|x| x.to_string()).collect()
}

fn image(entrypoint: Option<&[&str]>, cmd: Option<&[&str]>) -> RunConfig {
    RunConfig {
        entrypoint: entrypoint.map(v),
        cmd: cmd.map(v),
        ..Default::default()
    }
}

fn req(command: &[&str], args: &[&str]) -> ContainerRequest {
    ContainerRequest {
        name: "web".into(),
        command: v(command),
        args: v(args),
        ..Default::default()
    }
}

#[test]
fn argv_follows_the_docker_rules() {
    type Case<'a> = (
        &'a [&'a str],
        &'a [&'a str],
        Option<&'a [&'a str]>,
        Option<&'a [&'a str]>,
    );
    let cases: Vec<(Case, &[&str])> = vec![
        ((&[], &[], Some(&["/ep"]), Some(&["cmd"])), &["/ep", "cmd"]),
        (
            (&[], &["a1"], Some(&["/ep"]), Some(&["cmd"])),
            &["/ep", "a1"],
        ),
        (
            (&["/bin/x"], &[], Some(&["/ep"]), Some(&["cmd"])),
            &["/bin/x"],
        ),
        (
            (&["/bin/x"], &["a1", "a2"], Some(&["/ep"]), Some(&["cmd"])),
            &["/bin/x", "a1", "a2"],
        ),
        ((&[], &[], None, Some(&["sh"])), &["sh"]),
        ((&[], &["a1"], None, Some(&["sh"])), &["a1"]),
        (
            (&[], &[], Some(&[""]), Some(&["sh", "-c", "x"])),
            &["sh", "-c", "x"],
        ),
        ((&[], &[], Some(&["/ep"]), None), &["/ep"]),
    ];
    for ((command, args, ep, cmd), want) in cases {
        let got = super::args(&req(command, args), &image(ep, cmd)).expect("args");
        assert_eq!(
            got,
            v(want),
            "command {command:?} args {args:?} ep {ep:?} cmd {cmd:?}"
        );
    }
}

#[test]
fn no_command_anywhere_is_invalid() {
    let err = super::args(&req(&[], &[]), &image(None, None)).expect_err("empty");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert_eq!(err.message(), "container web: no command specified");
    let err = super::args(&req(&[], &[]), &image(Some(&[""]), None)).expect_err("blank ep");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(super::args(&req(&["a\0b"], &[]), &image(None, None)).is_err());
}

#[test]
fn env_layers_default_path_hostname_image_then_request() {
    let mut r = req(&[], &[]);
    r.envs = vec![
        ("FOO".into(), b"cri".to_vec()),
        ("NEW".into(), b"x=y".to_vec()),
        ("EMPTY".into(), Vec::new()),
    ];
    let img = RunConfig {
        env: Some(v(&["PATH=/img/bin", "FOO=bar", "KEEP=1", "HOSTNAME=img"])),
        ..Default::default()
    };
    let got = env(&r, &img, "pod-a").expect("env");
    assert_eq!(
        got,
        v(&[
            "PATH=/img/bin",
            "HOSTNAME=img",
            "FOO=cri",
            "KEEP=1",
            "NEW=x=y",
            "EMPTY="
        ])
    );
    let got = env(&req(&[], &[]), &RunConfig::default(), "pod-a").expect("defaults");
    assert_eq!(got, v(&[DEFAULT_PATH, "HOSTNAME=pod-a"]));
    let mut tty = req(&[], &[]);
    tty.tty = true;
    let got = env(&tty, &RunConfig::default(), "pod-a").expect("tty");
    assert_eq!(got, v(&[DEFAULT_PATH, "TERM=xterm", "HOSTNAME=pod-a"]));
    let mut r = req(&[], &[]);
    r.envs = vec![("PATH".into(), b"/mine".to_vec())];
    assert_eq!(
        env(&r, &RunConfig::default(), "h").expect("path")[0],
        "PATH=/mine"
    );
}

#[test]
fn a_bare_image_key_unsets_the_variable() {
    let img = RunConfig {
        env: Some(v(&["A=1", "PATH"])),
        ..Default::default()
    };
    assert_eq!(
        env(&req(&[], &[]), &img, "h").expect("env"),
        v(&["HOSTNAME=h", "A=1"])
    );
}

#[test]
fn bad_env_entries_are_invalid_and_named() {
    for (k, val) in [("", "x"), ("A=B", "x"), ("K", "a\0b")] {
        let mut r = req(&[], &[]);
        r.envs = vec![(k.into(), val.as_bytes().to_vec())];
        let err = env(&r, &RunConfig::default(), "h").expect_err(k);
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    }
    let mut r = req(&[], &[]);
    r.envs = vec![("BIN".into(), vec![0xff, 0xfe])];
    let err = env(&r, &RunConfig::default(), "h").expect_err("utf8");
    assert!(err.message().contains("BIN"), "{err}");
}

#[test]
fn cwd_prefers_request_then_image_then_root() {
    let img = RunConfig {
        working_dir: Some("/srv".into()),
        ..Default::default()
    };
    let mut r = req(&[], &[]);
    assert_eq!(cwd(&r, &RunConfig::default()).expect("root"), "/");
    assert_eq!(cwd(&r, &img).expect("image"), "/srv");
    r.working_dir = Some(String::new());
    assert_eq!(cwd(&r, &img).expect("empty request"), "/srv");
    r.working_dir = Some("/data".into());
    assert_eq!(cwd(&r, &img).expect("request"), "/data");
    r.working_dir = Some("data".into());
    assert_eq!(
        cwd(&r, &img).expect_err("relative").kind(),
        ErrorKind::InvalidArgument
    );
    let rel = RunConfig {
        working_dir: Some("app".into()),
        ..Default::default()
    };
    assert_eq!(cwd(&req(&[], &[]), &rel).expect("relative image"), "/app");
}

#[test]
fn oom_score_adj_is_clamped_to_the_daemons() {
    let cases = [
        (None, -999, None),
        (Some(1000), -999, Some(1000)),
        (Some(-998), -999, Some(-998)),
        (Some(-1000), -999, Some(-999)),
        (Some(0), 0, Some(0)),
        (Some(-500), 0, Some(0)),
        (Some(500), 0, Some(500)),
    ];
    for (req, daemon, want) in cases {
        assert_eq!(
            oom_score_adj("c", req, daemon).expect("clamp"),
            want,
            "{req:?} {daemon}"
        );
    }
    assert!(oom_score_adj("c", Some(1001), 0).is_err());
    assert!(oom_score_adj("c", Some(-1001), 0).is_err());
}

#[test]
fn daemon_oom_score_adj_reads_proc() {
    let v = daemon_oom_score_adj().expect("read");
    assert!((-1000..=1000).contains(&v));
}
