//! Firewall rules CNI plugins tagged with a sandbox id, found and removed after a DEL that may
//! have missed them (issue 16: a DEL that did not remove what ADD made is not done).
//!
//! The reference plugins (bridge's ipMasq, portmap, firewall) put `id: "<container id>"` in the
//! comment of every iptables rule they add. Their DEL finds some of those rules from the pod's
//! interface: once a first DEL has deleted the interface and then failed, a retried DEL
//! "succeeds" without touching the masquerade chain, and the rules stay for good. After a DEL
//! that follows an interrupted ADD or a failed DEL, [`sweep`] looks for rules naming the
//! sandbox id in every table (IPv4 and IPv6), deletes them and the per-pod `CNI-` chains only
//! they jumped to, and fails if any is left. Sandbox ids are 64 random hex digits: nothing
//! else names them.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};

/// How long one iptables command may take (it waits for the xtables lock).
const IPTABLES_TIMEOUT: Duration = Duration::from_secs(30);

/// One rule as `iptables-save` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    table: String,
    /// `CHAIN args…` (after `-A `).
    spec: String,
}

/// `(save, iptables)` binaries of each address family that is installed.
fn families() -> Vec<(PathBuf, PathBuf)> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/sbin"].map(PathBuf::from));
    [
        ("iptables-save", "iptables"),
        ("ip6tables-save", "ip6tables"),
    ]
    .iter()
    .filter_map(|(save, tool)| {
        let save = super::invoke::find_plugin(save, &dirs).ok()?;
        let tool = super::invoke::find_plugin(tool, &dirs).ok()?;
        Some((save, tool))
    })
    .collect()
}

async fn run(bin: &PathBuf, args: &[String]) -> Result<String> {
    let what = format!("{} {}", bin.display(), args.join(" "));
    let out = tokio::time::timeout(
        IPTABLES_TIMEOUT,
        tokio::process::Command::new(bin)
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .map_err(|_| Error::internal(format!("{what}: timed out")))?
    .map_err(|e| Error::internal(format!("{what}: {e}")))?;
    if !out.status.success() {
        return Err(Error::internal(format!(
            "{what}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Every rule of an `iptables-save` dump, with its table.
fn parse_save(text: &str) -> Vec<Rule> {
    let mut table = String::new();
    let mut rules = Vec::new();
    for line in text.lines() {
        if let Some(t) = line.strip_prefix('*') {
            table = t.trim().to_string();
        } else if let Some(spec) = line.strip_prefix("-A ") {
            rules.push(Rule {
                table: table.clone(),
                spec: spec.to_string(),
            });
        }
    }
    rules
}

/// The chain a rule jumps or goes to (`-j X` / `-g X`).
fn target(spec: &str) -> Option<String> {
    let words = split_rule(spec);
    let at = words.iter().position(|w| w == "-j" || w == "-g")?;
    words.get(at + 1).cloned()
}

/// Splits a rule as `iptables-save` prints it into arguments: `"…"` (with `\"` inside) is one.
pub fn split_rule(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if quoted && chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ' ' if !quoted => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The chains the reference plugins name after the network and the container id: bridge's
/// masquerade chain (`CNI-`) and portmap's per-pod chains (`CNI-DN-`, `CNI-SN-`), each
/// `CNI-[prefix]` + sha512(network + id) in hex, cut to 28 characters.
pub fn pod_chains(network: &str, id: &str) -> [String; 3] {
    use sha2::{Digest, Sha512};
    let hex: String = Sha512::digest(format!("{network}{id}"))
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    ["", "DN-", "SN-"].map(|prefix| format!("CNI-{prefix}{hex}").chars().take(28).collect())
}

/// `(table, chain)` of every chain an `iptables-save` dump declares.
fn parse_chains(text: &str) -> Vec<(String, String)> {
    let mut table = String::new();
    let mut chains = Vec::new();
    for line in text.lines() {
        if let Some(t) = line.strip_prefix('*') {
            table = t.trim().to_string();
        } else if let Some(decl) = line.strip_prefix(':') {
            if let Some(name) = decl.split_whitespace().next() {
                chains.push((table.clone(), name.to_string()));
            }
        }
    }
    chains
}

impl Rule {
    /// The chain the rule is in.
    fn chain(&self) -> &str {
        self.spec.split_whitespace().next().unwrap_or_default()
    }
}

/// Removes what is left of sandbox `id` on networks `networks`: the rules naming it, then the
/// `CNI-` chains left empty with nothing jumping to them among those the rules were in or
/// jumped to and those named after the pod ([`pod_chains`]; a chain made just before a crash
/// may have no rule yet). Returns what was removed; fails (naming a rule) if rules naming
/// `id` are still there afterwards.
pub async fn sweep(id: &str, networks: &[String]) -> Result<Vec<String>> {
    let named: Vec<String> = networks.iter().flat_map(|n| pod_chains(n, id)).collect();
    let mut removed = Vec::new();
    for (save, tool) in families() {
        let dump = run(&save, &[]).await?;
        let mut candidates: Vec<(String, String)> = parse_chains(&dump)
            .into_iter()
            .filter(|(_, c)| named.contains(c))
            .collect();
        let rules = parse_save(&dump);
        let tagged: Vec<&Rule> = rules.iter().filter(|r| r.spec.contains(id)).collect();
        if tagged.is_empty() && candidates.is_empty() {
            continue;
        }
        for r in &tagged {
            let mut args = vec!["-w".to_string(), "-t".into(), r.table.clone(), "-D".into()];
            args.extend(split_rule(&r.spec));
            match run(&tool, &args).await {
                Ok(_) => removed.push(format!("{} -t {} -A {}", tool.display(), r.table, r.spec)),
                Err(e) => tracing::warn!(sandbox = %id, "remove leftover rule: {e}"),
            }
            let chains = [Some(r.chain().to_string()), target(&r.spec)];
            for c in chains
                .into_iter()
                .flatten()
                .filter(|c| c.starts_with("CNI-"))
            {
                if !candidates.iter().any(|(t, n)| *t == r.table && *n == c) {
                    candidates.push((r.table.clone(), c));
                }
            }
        }
        // A chain goes once it is empty and nothing jumps to it (shared ones never are).
        let rules = parse_save(&run(&save, &[]).await?);
        for (table, chain) in candidates {
            let used = rules.iter().any(|r| {
                r.table == table
                    && (r.chain() == chain || target(&r.spec).as_deref() == Some(chain.as_str()))
            });
            if used {
                continue;
            }
            let args = ["-w", "-t", &table, "-X", &chain].map(str::to_string);
            match run(&tool, &args).await {
                Ok(_) => removed.push(format!("{} -t {table} -X {chain}", tool.display())),
                Err(e) => tracing::warn!(sandbox = %id, "remove leftover chain: {e}"),
            }
        }
        let left: Vec<Rule> = parse_save(&run(&save, &[]).await?)
            .into_iter()
            .filter(|r| r.spec.contains(id))
            .collect();
        if let Some(r) = left.first() {
            return Err(Error::internal(format!(
                "{} rules naming the sandbox are left after DEL (first: -t {} -A {})",
                left.len(),
                r.table,
                r.spec.chars().take(200).collect::<String>()
            )));
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAVE: &str = r#"# Generated by iptables-save
*nat
:POSTROUTING ACCEPT [0:0]
:CNI-0123456789abcdef01234567 - [0:0]
-A POSTROUTING -s 10.86.0.5/32 -m comment --comment "name: \"bosun\" id: \"feed\"" -j CNI-0123456789abcdef01234567
-A CNI-0123456789abcdef01234567 -d 10.86.0.0/16 -m comment --comment "name: \"bosun\" id: \"feed\"" -j ACCEPT
-A POSTROUTING -j KUBE-POSTROUTING
COMMIT
*filter
-A FORWARD -m comment --comment "other" -g CNI-FORWARD
COMMIT
"#;

    #[test]
    fn a_save_dump_parses_into_rules_with_tables_and_targets() {
        let rules = parse_save(SAVE);
        assert_eq!(rules.len(), 4);
        assert_eq!(rules[0].table, "nat");
        assert_eq!(rules[3].table, "filter");
        let t = |i: usize| target(&rules[i].spec);
        assert_eq!(t(0).as_deref(), Some("CNI-0123456789abcdef01234567"));
        assert_eq!(t(1).as_deref(), Some("ACCEPT"));
        assert_eq!(t(3).as_deref(), Some("CNI-FORWARD"));
        let tagged: Vec<_> = rules.iter().filter(|r| r.spec.contains("feed")).collect();
        assert_eq!(tagged.len(), 2);
    }

    #[test]
    fn chains_are_declared_per_table_and_named_after_the_pod() {
        let chains = parse_chains(SAVE);
        assert!(chains.contains(&("nat".into(), "CNI-0123456789abcdef01234567".into())));
        assert!(chains.contains(&("nat".into(), "POSTROUTING".into())));
        let rules = parse_save(SAVE);
        assert_eq!(rules[1].chain(), "CNI-0123456789abcdef01234567");
        // bridge's and portmap's names for network "bosun-it-tbdVY3l" and this sandbox, as
        // iptables showed them (the churn test found the first one left behind).
        let id = "5306f21271163fb7108eb0c1f1f89867fe734781e2e1291fb1e8b6e42718b6fa";
        let [masq, dnat, snat] = pod_chains("bosun-it-tbdVY3l", id);
        assert_eq!(masq, "CNI-2e5a6bcd7d889b4473fcf23f");
        assert_eq!((dnat.len(), snat.len()), (28, 28));
        assert!(dnat.starts_with("CNI-DN-2e5a6bcd7d889b447") && snat.starts_with("CNI-SN-2e5a"));
    }

    #[test]
    fn quoted_comments_stay_one_argument() {
        let words = split_rule(
            r#"POSTROUTING -s 10.86.0.5/32 -m comment --comment "name: \"bosun\" id: \"feed\"" -j X"#,
        );
        assert_eq!(
            words,
            [
                "POSTROUTING",
                "-s",
                "10.86.0.5/32",
                "-m",
                "comment",
                "--comment",
                r#"name: "bosun" id: "feed""#,
                "-j",
                "X"
            ]
        );
    }
}
