//! The flags of the `ctr` commands bosun runs, containerd's other commands, Go's flag syntax (`-n x`, `--n=x`, `-digests`, `--all-platforms=true`) and the help texts.

use std::collections::BTreeMap;

/// What went wrong, as ctr's user should read it (printed after `ctr: `).
pub type Refusal = String;

/// The values of the flags given, by canonical name.
pub(super) type Values = BTreeMap<&'static str, Vec<String>>;

/// How a flag takes its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// `--x`, `--x=true|false`.
    Bool,
    /// `--x v`, `--x=v`; the last one counts.
    Value,
    /// Repeatable: every value counts.
    Values,
}

/// A flag: its names (the first is canonical) and kind.
pub(super) struct Flag {
    names: &'static [&'static str],
    kind: Kind,
}

pub(super) const fn flag(names: &'static [&'static str], kind: Kind) -> Flag {
    Flag { names, kind }
}

pub(super) const GLOBAL: &[Flag] = &[
    flag(&["debug"], Kind::Bool),
    flag(&["address", "a"], Kind::Value),
    flag(&["timeout"], Kind::Value),
    flag(&["connect-timeout"], Kind::Value),
    flag(&["namespace", "n"], Kind::Value),
    flag(&["help", "h"], Kind::Bool),
    flag(&["version", "v"], Kind::Bool),
];

pub(super) const HELP: Flag = flag(&["help", "h"], Kind::Bool);

pub(super) const IMPORT: &[Flag] = &[
    HELP,
    flag(&["base-name"], Kind::Value),
    flag(&["digests"], Kind::Bool),
    flag(&["skip-digest-for-named"], Kind::Bool),
    flag(&["index-name"], Kind::Value),
    flag(&["all-platforms"], Kind::Bool),
    flag(&["platform"], Kind::Value),
    flag(&["no-unpack"], Kind::Bool),
    flag(&["local"], Kind::Bool),
    flag(&["compress-blobs"], Kind::Bool),
    flag(&["discard-unpacked-layers"], Kind::Bool),
    flag(&["sync-fs"], Kind::Bool),
    flag(&["snapshotter"], Kind::Value),
    flag(&["label"], Kind::Values),
];

pub(super) const LIST: &[Flag] = &[HELP, flag(&["quiet", "q"], Kind::Bool)];

pub(super) const REMOVE: &[Flag] = &[HELP, flag(&["sync"], Kind::Bool)];

pub(super) const TAG: &[Flag] = &[
    HELP,
    flag(&["force"], Kind::Bool),
    flag(&["local"], Kind::Bool),
    flag(&["skip-reference-check"], Kind::Bool),
];

pub(super) const PULL: &[Flag] = &[
    HELP,
    flag(&["skip-verify", "k"], Kind::Bool),
    flag(&["plain-http"], Kind::Bool),
    flag(&["user", "u"], Kind::Value),
    flag(&["refresh"], Kind::Value),
    flag(&["hosts-dir"], Kind::Value),
    flag(&["tlscacert"], Kind::Value),
    flag(&["tlscert"], Kind::Value),
    flag(&["tlskey"], Kind::Value),
    flag(&["http-dump"], Kind::Bool),
    flag(&["http-trace"], Kind::Bool),
    flag(&["snapshotter"], Kind::Value),
    flag(&["label"], Kind::Values),
    flag(&["platform"], Kind::Values),
    flag(&["all-platforms"], Kind::Bool),
    flag(&["all-metadata"], Kind::Bool),
    flag(&["skip-metadata"], Kind::Bool),
    flag(&["metadata-only"], Kind::Bool),
    flag(&["print-chainid"], Kind::Bool),
    flag(&["max-concurrent-downloads"], Kind::Value),
    flag(&["local"], Kind::Bool),
    flag(&["sync-fs"], Kind::Bool),
];

pub(super) const VERSION: &[Flag] = &[HELP];

/// containerd's other top-level commands (with their aliases): known, and refused.
pub(super) const ELSEWHERE: &[&str] = &[
    "plugins",
    "plugin",
    "containers",
    "c",
    "container",
    "content",
    "events",
    "event",
    "leases",
    "namespaces",
    "namespace",
    "ns",
    "pprof",
    "run",
    "snapshots",
    "snapshot",
    "tasks",
    "t",
    "task",
    "install",
    "oci",
    "sandboxes",
    "sandbox",
    "sb",
    "info",
    "deprecations",
    "shim",
    "images-export",
];

/// containerd's other `images` subcommands: known, and refused.
pub(super) const IMAGES_ELSEWHERE: &[&str] = &[
    "check",
    "export",
    "inspect",
    "mount",
    "unmount",
    "push",
    "prune",
    "label",
    "convert",
    "usage",
    "build-erofs-cache",
];

/// Splits `args` into flags of `known` and the other arguments. `stop_at_arg`: the first
/// argument that is not a flag ends the flags (a command name follows, with its own flags);
/// otherwise flags and arguments may mix. `--` ends the flags. Go's syntax: one or two dashes,
/// `=value` or the next argument, booleans take `=true|false` only.
pub(super) fn flags(
    args: &[String],
    known: &[Flag],
    stop_at_arg: bool,
) -> Result<(Values, Vec<String>), Refusal> {
    let mut values = Values::new();
    let mut rest = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "--" {
            rest.extend(args[i..].iter().cloned());
            break;
        }
        let body = match a.strip_prefix("--").or_else(|| a.strip_prefix('-')) {
            Some(b) if !b.is_empty() && !a.starts_with("---") => b,
            _ => {
                rest.push(a.clone());
                if stop_at_arg {
                    rest.extend(args[i..].iter().cloned());
                    break;
                }
                continue;
            }
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        let f = known
            .iter()
            .find(|f| f.names.contains(&name))
            .ok_or_else(|| format!("flag provided but not defined: -{name}"))?;
        let value = match (f.kind, inline) {
            (Kind::Bool, Some(v)) => v,
            (Kind::Bool, None) => "true".to_string(),
            (_, Some(v)) => v,
            (_, None) => {
                let v = args
                    .get(i)
                    .ok_or_else(|| format!("flag needs an argument: -{name}"))?;
                i += 1;
                v.clone()
            }
        };
        let slot = values.entry(f.names[0]).or_default();
        if f.kind != Kind::Values {
            slot.clear();
        }
        slot.push(value);
    }
    Ok((values, rest))
}

/// Whether boolean flag `name` is set (Go's strconv.ParseBool spellings).
pub(super) fn is_set(v: &Values, name: &str) -> Result<bool, Refusal> {
    match v.get(name).and_then(|x| x.last()).map(String::as_str) {
        None => Ok(false),
        Some("1" | "t" | "T" | "TRUE" | "true" | "True") => Ok(true),
        Some("0" | "f" | "F" | "FALSE" | "false" | "False") => Ok(false),
        Some(other) => Err(format!(
            "invalid boolean value {other:?} for -{name}: parse error"
        )),
    }
}

pub(super) fn last(v: &Values, name: &str) -> Option<String> {
    v.get(name).and_then(|x| x.last()).cloned()
}

pub(super) const USAGE: &str = "\
NAME:
   ctr - containerd's CLI, as bosun serves it (images and version)

USAGE:
   ctr [global options] command [command options] [arguments...]

COMMANDS:
   images, image, i  Manage images: import, list|ls, delete|del|remove|rm, tag, pull
   version           Print the client and server versions

GLOBAL OPTIONS:
   --address value, -a value    address of bosun's socket (default: /run/bosun/bosun.sock, else /run/containerd/containerd.sock) [$CONTAINERD_ADDRESS]
   --namespace value, -n value  namespace: k8s.io or default, bosun's one image store (default: \"default\") [$CONTAINERD_NAMESPACE]
   --timeout value              total timeout for ctr commands
   --connect-timeout value      timeout for connecting to bosun
   --debug                      accepted
   --help, -h                   show help
   --version, -v                print the version
";

pub(super) const IMAGES_USAGE: &str = "\
ctr images: import, list|ls, delete|del|remove|rm, tag, pull
(check, export, inspect, mount, unmount, push, prune, label, convert, usage: not supported by bosun)
";

pub(super) const IMPORT_USAGE: &str = "\
ctr images import [flags] <in>   (<in>: an archive file, or - for stdin)
   OCI image layouts and docker archives (docker save, podman save, skopeo), gzip allowed.
   --base-name value            base image name for added images; only names under it are kept
   --digests                    also name each image <base-name or import-<date>>@<digest>
   --skip-digest-for-named      with --digests: only images that have no name
   --index-name value           name for the archive's image (an archive of one image)
   --all-platforms, --platform  this node's platform is kept
   --no-unpack, --local, --sync-fs, --snapshotter overlayfs: accepted (same result)
";

pub(super) const PULL_USAGE: &str = "\
ctr images pull [flags] <ref>
   --plain-http, --skip-verify/-k, --user/-u user[:password], --refresh token,
   --hosts-dir dir, --tlscacert file, --tlscert file, --tlskey file, --print-chainid
   --all-platforms, --platform (this node's), --max-concurrent-downloads, --local,
   --snapshotter overlayfs: accepted
";
