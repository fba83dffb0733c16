//! `ctr` command lines as containerd's ctr takes them (`-n k8s.io images import --digests -`), into what bosun does or a clear refusal.

use std::path::PathBuf;
use std::time::Duration;

pub use super::flags::Refusal;
use super::flags::{
    flags, is_set, last, Values, ELSEWHERE, GLOBAL, HELP, IMAGES_ELSEWHERE, IMAGES_USAGE, IMPORT,
    IMPORT_USAGE, LIST, PULL, PULL_USAGE, REMOVE, TAG, USAGE, VERSION,
};

/// containerd's default socket: what `ctr` dials when nothing else is said and bosun's own
/// socket is absent.
pub const CONTAINERD_SOCKET: &str = "/run/containerd/containerd.sock";
/// The namespace the kubelet's images live in (containerd's CRI namespace).
pub const K8S_NAMESPACE: &str = "k8s.io";
/// containerd's default namespace.
pub const DEFAULT_NAMESPACE: &str = "default";

/// What the parse asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Run a command.
    Run(Box<Invocation>),
    /// Print this text and exit 0 (`--help`, `--version`).
    Print(String),
}

/// A command with the global flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// `-a/--address`, `$CONTAINERD_ADDRESS`: the socket (`None`: bosun's, else containerd's).
    pub address: Option<PathBuf>,
    /// `-n/--namespace`, `$CONTAINERD_NAMESPACE`.
    pub namespace: String,
    /// `--timeout`: the whole command's.
    pub timeout: Option<Duration>,
    /// `--connect-timeout`.
    pub connect_timeout: Option<Duration>,
    /// The command.
    pub command: Command,
}

/// The commands bosun's ctr runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `ctr version`.
    Version,
    /// `ctr images import`.
    Import(Import),
    /// `ctr images ls`: `quiet`, and `name==<ref>` filters (any of them matching).
    List {
        /// `-q`: names only.
        quiet: bool,
        /// Names asked for (`name==…`); empty: every image.
        names: Vec<String>,
    },
    /// `ctr images rm <ref>...`.
    Remove(Vec<String>),
    /// `ctr images tag [--force] <source> <target>...`.
    Tag {
        /// The image.
        source: String,
        /// New names.
        targets: Vec<String>,
        /// `--force`.
        force: bool,
    },
    /// `ctr images pull`.
    Pull(Pull),
}

/// `ctr images import` as bosun runs it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Import {
    /// The archive; `-` is stdin.
    pub input: String,
    /// `--base-name`.
    pub base_name: Option<String>,
    /// `--digests`.
    pub digests: bool,
    /// `--skip-digest-for-named`.
    pub skip_digest_for_named: bool,
    /// `--index-name`.
    pub index_name: Option<String>,
}

/// `ctr images pull` as bosun runs it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pull {
    /// The reference.
    pub reference: String,
    /// `-u/--user`: `user[:password]`.
    pub user: Option<String>,
    /// `--refresh`: an OAuth2 refresh token.
    pub refresh: Option<String>,
    /// `--plain-http`.
    pub plain_http: bool,
    /// `-k/--skip-verify`.
    pub skip_verify: bool,
    /// `--hosts-dir`.
    pub hosts_dir: Option<String>,
    /// `--tlscacert`, `--tlscert`, `--tlskey`.
    pub tls_ca: Option<String>,
    /// Client certificate.
    pub tls_cert: Option<String>,
    /// Its key.
    pub tls_key: Option<String>,
    /// `--print-chainid`.
    pub print_chainid: bool,
}

/// Parses `args` (after the program name), with `env` giving `CONTAINERD_ADDRESS`,
/// `CONTAINERD_NAMESPACE` and `CONTAINERD_SNAPSHOTTER`.
pub fn parse(args: &[String], env: impl Fn(&str) -> Option<String>) -> Result<Parsed, Refusal> {
    let (globals, rest) = flags(args, GLOBAL, true)?;
    if is_set(&globals, "help")? && rest.is_empty() {
        return Ok(Parsed::Print(USAGE.into()));
    }
    if is_set(&globals, "version")? {
        return Ok(Parsed::Print(format!(
            "ctr bosun {}\n",
            crate::version::LONG
        )));
    }
    let Some((cmd, rest)) = rest.split_first() else {
        return Ok(Parsed::Print(USAGE.into()));
    };
    let address = last(&globals, "address")
        .or_else(|| env("CONTAINERD_ADDRESS"))
        .filter(|a| !a.is_empty())
        .map(|a| PathBuf::from(a.strip_prefix("unix://").unwrap_or(&a)));
    let namespace = last(&globals, "namespace")
        .or_else(|| env("CONTAINERD_NAMESPACE"))
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| DEFAULT_NAMESPACE.into());
    let duration = |d: &str| -> Result<Option<Duration>, Refusal> {
        match last(&globals, d) {
            None => Ok(None),
            Some(v) => crate::config::eviction::parse_duration(&v)
                .map(|t| Some(t).filter(|t| !t.is_zero()))
                .ok_or_else(|| format!("invalid value {v:?} for flag -{d}: parse error")),
        }
    };
    let (timeout, connect_timeout) = (duration("timeout")?, duration("connect-timeout")?);
    let command = match cmd.as_str() {
        "version" => {
            let (v, args) = flags(rest, VERSION, false)?;
            if is_set(&v, "help")? {
                return Ok(Parsed::Print(
                    "ctr version: print the client and server versions\n".into(),
                ));
            }
            if !args.is_empty() {
                return Err(format!("extra arguments: {args:?}"));
            }
            Command::Version
        }
        "images" | "image" | "i" => match images(rest, &env)? {
            Ok(c) => c,
            Err(text) => return Ok(Parsed::Print(text)),
        },
        c if ELSEWHERE.contains(&c) => return Err(unsupported(c)),
        c => return Err(format!("unknown command {c:?} ({})", supported())),
    };
    if command != Command::Version {
        check_namespace(&namespace)?;
    }
    Ok(Parsed::Run(Box::new(Invocation {
        address,
        namespace,
        timeout,
        connect_timeout,
        command,
    })))
}

fn supported() -> &'static str {
    "bosun's ctr runs images import|ls|rm|tag|pull and version"
}

/// The refusal of a containerd command bosun does not run.
pub fn unsupported(cmd: &str) -> Refusal {
    format!(
        "ctr {cmd}: not supported by bosun (images and version only; use crictl for pods, \
         containers and their state)"
    )
}

/// bosun keeps one image store, the one the kubelet uses: containerd's `k8s.io` namespace.
/// `default` (ctr's own default) is the same store, so that `ctr images import x.tar` works
/// as scripts expect; any other namespace would silently mix images, so it is refused.
fn check_namespace(ns: &str) -> Result<(), Refusal> {
    if ns == K8S_NAMESPACE || ns == DEFAULT_NAMESPACE {
        return Ok(());
    }
    Err(format!(
        "namespace {ns:?}: not supported by bosun, which keeps one image store: the kubelet's \
         ({K8S_NAMESPACE:?}; {DEFAULT_NAMESPACE:?} names the same store)"
    ))
}

/// `ctr images <sub> ...`: a command, or help text.
fn images(
    args: &[String],
    env: &impl Fn(&str) -> Option<String>,
) -> Result<std::result::Result<Command, String>, Refusal> {
    let (head, rest) = flags(args, &[HELP], true)?;
    let Some((sub, rest)) = rest.split_first() else {
        let _ = head;
        return Ok(Err(IMAGES_USAGE.into()));
    };
    let help = |v: &Values, text: &str| -> Result<Option<String>, Refusal> {
        Ok(is_set(v, "help")?.then(|| text.to_string()))
    };
    let cmd = match sub.as_str() {
        "import" => {
            let (v, args) = flags(rest, IMPORT, false)?;
            if let Some(t) = help(&v, IMPORT_USAGE)? {
                return Ok(Err(t));
            }
            Command::Import(import(&v, &args, env)?)
        }
        "list" | "ls" => {
            let (v, args) = flags(rest, LIST, false)?;
            if let Some(t) = help(&v, "ctr images ls [-q] [name==<ref>...]\n")? {
                return Ok(Err(t));
            }
            let mut names = Vec::new();
            for f in args {
                match f.strip_prefix("name==") {
                    Some(n) => names.push(n.to_string()),
                    None => {
                        return Err(format!(
                            "filter {f:?}: bosun's ctr filters by name only (name==<ref>)"
                        ))
                    }
                }
            }
            Command::List {
                quiet: is_set(&v, "quiet")?,
                names,
            }
        }
        "delete" | "del" | "remove" | "rm" => {
            let (v, args) = flags(rest, REMOVE, false)?;
            if let Some(t) = help(&v, "ctr images rm [--sync] <ref>...\n")? {
                return Ok(Err(t));
            }
            // --sync: bosun's removal is done when the call returns; layers are collected
            // in the background either way.
            is_set(&v, "sync")?;
            Command::Remove(args)
        }
        "tag" => {
            let (v, args) = flags(rest, TAG, false)?;
            if let Some(t) = help(
                &v,
                "ctr images tag [--force] <source_ref> <target_ref>...\n",
            )? {
                return Ok(Err(t));
            }
            let Some((source, targets)) = args.split_first() else {
                return Err("please provide an image reference to tag from".into());
            };
            if targets.is_empty() {
                return Err("please provide an image reference to tag to".into());
            }
            // --local: there is no transfer service to bypass; --skip-reference-check: bosun
            // can only store names that parse as references, so it checks them anyway.
            is_set(&v, "local")?;
            is_set(&v, "skip-reference-check")?;
            Command::Tag {
                source: source.clone(),
                targets: targets.to_vec(),
                force: is_set(&v, "force")?,
            }
        }
        "pull" => {
            let (v, args) = flags(rest, PULL, false)?;
            if let Some(t) = help(&v, PULL_USAGE)? {
                return Ok(Err(t));
            }
            Command::Pull(pull(&v, &args, env)?)
        }
        s if IMAGES_ELSEWHERE.contains(&s) => return Err(unsupported(&format!("images {s}"))),
        s => return Err(format!("unknown command \"images {s}\" ({})", supported())),
    };
    Ok(Ok(cmd))
}

fn import(
    v: &Values,
    args: &[String],
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Import, Refusal> {
    let input = args
        .first()
        .cloned()
        .ok_or("please provide an archive to import (a file, or - for stdin)")?;
    snapshotter(v, env)?;
    platforms(v)?;
    // bosun keeps this node's platform of an index (what its containers can run), whatever
    // the archive holds besides.
    is_set(v, "all-platforms")?;
    // bosun unpacks at import: the image is ready at once, as it is after containerd's later
    // unpack; --local: there is no transfer service to bypass; --sync-fs: bosun syncs unpacked
    // layers always.
    for same in ["no-unpack", "local", "sync-fs"] {
        is_set(v, same)?;
    }
    if is_set(v, "compress-blobs")? {
        return Err(
            "--compress-blobs: not supported by bosun, which stores docker-archive \
                    layers as the archive has them"
                .into(),
        );
    }
    if is_set(v, "discard-unpacked-layers")? {
        return Err(
            "--discard-unpacked-layers: not supported by bosun, which keeps every \
                    image's layer blobs"
                .into(),
        );
    }
    labels(v)?;
    let digests = is_set(v, "digests")?;
    let skip_digest_for_named = is_set(v, "skip-digest-for-named")?;
    if skip_digest_for_named && !digests {
        return Err("--skip-digest-for-named must be specified with --digests option".into());
    }
    Ok(Import {
        input,
        base_name: last(v, "base-name").filter(|s| !s.is_empty()),
        digests,
        skip_digest_for_named,
        index_name: last(v, "index-name").filter(|s| !s.is_empty()),
    })
}

fn pull(
    v: &Values,
    args: &[String],
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Pull, Refusal> {
    let reference = args
        .first()
        .cloned()
        .ok_or("please provide an image reference to pull")?;
    snapshotter(v, env)?;
    platforms(v)?;
    if is_set(v, "all-platforms")? && v.contains_key("platform") {
        return Err("cannot specify both --platform and --all-platforms".into());
    }
    for same in [
        "all-platforms",
        "all-metadata",
        "skip-metadata",
        "metadata-only",
        "local",
        "sync-fs",
    ] {
        is_set(v, same)?;
    }
    for dump in ["http-dump", "http-trace"] {
        if is_set(v, dump)? {
            return Err(format!(
                "--{dump}: not supported by bosun; the daemon logs each registry request \
                 with log_level = \"debug\""
            ));
        }
    }
    if let Some(n) = last(v, "max-concurrent-downloads") {
        // The daemon's [image] max_concurrent_downloads applies.
        n.parse::<u32>()
            .map_err(|_| format!("invalid value {n:?} for flag -max-concurrent-downloads"))?;
    }
    labels(v)?;
    Ok(Pull {
        reference,
        user: last(v, "user"),
        refresh: last(v, "refresh").filter(|s| !s.is_empty()),
        plain_http: is_set(v, "plain-http")?,
        skip_verify: is_set(v, "skip-verify")?,
        hosts_dir: last(v, "hosts-dir").filter(|s| !s.is_empty()),
        tls_ca: last(v, "tlscacert").filter(|s| !s.is_empty()),
        tls_cert: last(v, "tlscert").filter(|s| !s.is_empty()),
        tls_key: last(v, "tlskey").filter(|s| !s.is_empty()),
        print_chainid: is_set(v, "print-chainid")?,
    })
}

/// bosun's snapshots are overlay directories: containerd's `overlayfs` snapshotter.
fn snapshotter(v: &Values, env: &impl Fn(&str) -> Option<String>) -> Result<(), Refusal> {
    let s = last(v, "snapshotter")
        .or_else(|| env("CONTAINERD_SNAPSHOTTER"))
        .unwrap_or_default();
    match s.as_str() {
        "" | "overlayfs" => Ok(()),
        other => Err(format!(
            "--snapshotter {other:?}: not supported by bosun, whose snapshots are overlayfs"
        )),
    }
}

/// `--platform` may only name this node's platform: bosun stores that one.
fn platforms(v: &Values) -> Result<(), Refusal> {
    let host = crate::image::manifest::Platform::host();
    let here = format!("{}/{}", host.os, host.architecture);
    for p in v.get("platform").into_iter().flatten() {
        let mut parts = p.split('/');
        let (os, arch, variant) = (parts.next(), parts.next(), parts.next());
        let arch = match arch {
            Some("x86_64") | Some("x86-64") => Some("amd64"),
            Some("aarch64") => Some("arm64"),
            a => a,
        };
        let same = os == Some(host.os.as_str())
            && arch.is_none_or(|a| a == host.architecture)
            && variant.is_none_or(|v| host.variant.as_deref().is_none_or(|h| h == v));
        if !same {
            return Err(format!(
                "--platform {p}: not supported by bosun, which stores this node's platform \
                 ({here}) only"
            ));
        }
    }
    Ok(())
}

/// bosun keeps no image labels (containerd's `io.cri-containerd.pinned` included).
fn labels(v: &Values) -> Result<(), Refusal> {
    match v.get("label") {
        Some(l) if !l.is_empty() => Err(format!(
            "--label {}: not supported by bosun, which keeps no image labels",
            l.join(",")
        )),
        _ => Ok(()),
    }
}
