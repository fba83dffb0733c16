//! Unit tests of the AppArmor profile text, the loaded-profiles parser and the create-time check.

use super::*;
use crate::error::ErrorKind;

const LIST: &str = "cri-containerd.apparmor.d (enforce)\n\
                    /usr/bin/man (enforce)\n\
                    bosun-default (enforce)\n\
                    lsb_release (complain)\n\
                    with space (enforce)\n";

fn sec(apparmor: SecurityProfile, privileged: bool) -> Security {
    Security {
        apparmor,
        privileged,
        ..Default::default()
    }
}

fn list() -> std::io::Result<String> {
    Ok(LIST.to_string())
}

fn unread() -> std::io::Result<String> {
    panic!("the profiles file must not be read for this request")
}

fn no_reload() -> Result<(), String> {
    panic!("nothing may be reloaded for this request")
}

#[test]
fn profile_text_names_itself_and_denies_the_kernel_knobs() {
    let t = profile_text("bosun-default");
    assert!(t.contains("profile bosun-default flags=(attach_disconnected,mediate_deleted) {"));
    for rule in [
        "deny mount,",
        "deny /proc/sys/** wl,",
        "deny /proc/* wl,",
        "deny /sys/firmware/** rwklx,",
        "ptrace (trace,read,tracedby,readby) peer=bosun-default,",
        "signal (receive) peer=unconfined,",
    ] {
        assert!(t.contains(rule), "missing {rule:?} in\n{t}");
    }
    // Self-contained and balanced: no includes the host may lack, one block.
    assert!(!t.contains("#include"));
    assert_eq!(t.matches('{').count(), t.matches('}').count());
    assert!(t.trim_end().ends_with('}'));
}

#[test]
fn parse_loaded_reads_names_with_any_mode() {
    assert_eq!(
        parse_loaded(LIST),
        vec![
            "cri-containerd.apparmor.d",
            "/usr/bin/man",
            "bosun-default",
            "lsb_release",
            "with space",
        ]
    );
    assert!(parse_loaded("").is_empty());
    assert_eq!(parse_loaded("bare\n\n"), vec!["bare"]);
}

#[test]
fn localhost_must_be_loaded_and_apparmor_on() {
    let ok = sec(SecurityProfile::Localhost("lsb_release".into()), false);
    check("c", &ok, true, None, list, no_reload).expect("loaded (complain mode counts)");
    let prefixed = sec(
        SecurityProfile::Localhost("localhost/with space".into()),
        false,
    );
    check("c", &prefixed, true, None, list, no_reload).expect("prefix stripped, spaces kept");

    let missing = sec(SecurityProfile::Localhost("not-loaded".into()), false);
    let e = check("c", &missing, true, None, list, no_reload).expect_err("refused");
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition);
    assert!(
        e.to_string().contains("\"not-loaded\" is not loaded"),
        "{e}"
    );

    // A privileged container gets its Localhost profile too (as containerd): checked.
    let privileged = sec(SecurityProfile::Localhost("not-loaded".into()), true);
    assert!(check("c", &privileged, true, None, list, no_reload).is_err());

    let e = check("c", &missing, false, None, unread, no_reload).expect_err("refused");
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition);
    assert!(
        e.to_string().contains("\"not-loaded\"") && e.to_string().contains("not enabled"),
        "{e}"
    );

    let empty = sec(SecurityProfile::Localhost("localhost/".into()), false);
    let e = check("c", &empty, true, None, unread, no_reload).expect_err("refused");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);

    let e = check(
        "c",
        &ok,
        true,
        None,
        || Err(std::io::Error::other("denied")),
        no_reload,
    )
    .expect_err("refused");
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition);
    assert!(e.to_string().contains("denied"), "{e}");
}

#[test]
fn runtime_default_is_checked_only_when_a_profile_applies() {
    let rd = sec(SecurityProfile::RuntimeDefault, false);
    check("c", &rd, false, None, unread, no_reload).expect("AppArmor off: nothing applies");
    check("c", &rd, true, None, unread, no_reload).expect("no default loaded: unconfined");
    let privileged = sec(SecurityProfile::RuntimeDefault, true);
    check("c", &privileged, true, Some("gone"), unread, no_reload).expect("privileged: unconfined");
    let unconfined = sec(SecurityProfile::Unconfined, false);
    check("c", &unconfined, true, Some("gone"), unread, no_reload).expect("unconfined");

    check("c", &rd, true, Some("bosun-default"), list, no_reload).expect("loaded");

    // Removed since start (`apparmor_parser -R`): loaded again on the spot, as containerd does.
    let reloaded = std::cell::Cell::new(false);
    check("c", &rd, true, Some("gone"), list, || {
        reloaded.set(true);
        Ok(())
    })
    .expect("reloaded");
    assert!(reloaded.get());
    let failed = || Err("apparmor_parser not found".to_string());
    let e = check("c", &rd, true, Some("gone"), list, failed).expect_err("refused");
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition);
    let msg = e.to_string();
    assert!(
        msg.contains("\"gone\"") && msg.contains("apparmor_parser not found"),
        "{msg}"
    );
}

#[test]
fn write_and_load_writes_the_text_and_reports_a_failing_parser() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = write_and_load(dir.path(), Path::new("/bin/false")).expect_err("refused");
    assert!(e.contains("failed"), "{e}");
    let text = std::fs::read_to_string(dir.path().join(DEFAULT_PROFILE)).expect("written");
    assert_eq!(text, profile_text(DEFAULT_PROFILE));
    // Only the profile is left: the temporary file was renamed.
    assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 1);
    let e = write_and_load(dir.path(), Path::new("/no/such/parser")).expect_err("refused");
    assert!(e.contains("run /no/such/parser"), "{e}");
}
