//! Docs that tests keep true: README.md's and docs/*.md's TOML parses with the daemon's parser, every config key has its row in docs/configuration.md, every `bosun …` command line parses with the CLI's parser.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::error::ErrorKind;
use clap::Parser;

use crate::cli::Cli;
use crate::config::{keys, Config, ConfigFile};

/// Subcommands `main` dispatches before the CLI's parser runs (the daemon's own children).
const INTERNAL_SUBCOMMANDS: [&str; 3] = ["monitor", "pinns", "pod-init"];

/// One documentation file: its path (relative to the crate) and text.
struct Doc {
    path: String,
    text: String,
}

/// README.md and every docs/*.md.
fn docs() -> Vec<Doc> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut paths = vec![root.join("README.md")];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    paths.extend(pages);
    paths
        .into_iter()
        .map(|p| Doc {
            text: std::fs::read_to_string(&p).expect("read a doc"),
            path: p.strip_prefix(&root).unwrap_or(&p).display().to_string(),
        })
        .collect()
}

/// A fenced code block: its info string's first word, the line of its first line, its text.
struct Block {
    lang: String,
    line: usize,
    text: String,
}

/// The fenced (```) blocks of `md`, and the prose around them (fences blanked, lines kept).
fn split_fences(md: &str) -> (Vec<Block>, String) {
    let mut blocks = Vec::new();
    let mut prose = String::new();
    let mut open: Option<Block> = None;
    for (i, line) in md.lines().enumerate() {
        let fence = line.trim_start().starts_with("```");
        match open.take() {
            Some(b) if fence => blocks.push(b),
            Some(mut b) => {
                b.text.push_str(line);
                b.text.push('\n');
                open = Some(b);
            }
            None if fence => {
                let info = line.trim_start().trim_start_matches('`');
                open = Some(Block {
                    lang: info.split_whitespace().next().unwrap_or("").to_string(),
                    line: i + 2,
                    text: String::new(),
                });
            }
            None => prose.push_str(line),
        }
        prose.push('\n');
    }
    assert!(open.is_none(), "an unclosed code fence");
    (blocks, prose)
}

/// The inline code spans of `prose` with their line numbers (spans may wrap lines).
fn code_spans(prose: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut line = 1;
    for (i, part) in prose.split('`').enumerate() {
        if i % 2 == 1 {
            out.push((line, part.split_whitespace().collect::<Vec<_>>().join(" ")));
        }
        line += part.matches('\n').count();
    }
    out
}

#[test]
fn every_toml_block_parses_with_the_daemons_parser() {
    let mut seen = 0;
    for doc in docs() {
        let (blocks, _) = split_fences(&doc.text);
        for b in blocks.iter().filter(|b| b.lang == "toml") {
            seen += 1;
            if let Err(e) = Config::parse(&b.text) {
                panic!(
                    "{}:{}: this TOML is not a valid bosun config: {e}",
                    doc.path, b.line
                );
            }
        }
    }
    assert!(seen >= 5, "only {seen} TOML blocks found in the docs");
}

/// The rows of the key tables in `md`: `| `key` | type | default | what |` → (key, default).
fn key_rows(md: &str) -> BTreeMap<String, String> {
    let mut rows = BTreeMap::new();
    for line in md.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        let key = cells[0].trim_matches('`').to_string();
        let default = cells.get(2).copied().unwrap_or("").to_string();
        assert!(
            rows.insert(key.clone(), default).is_none(),
            "docs/configuration.md: `{key}` has two rows"
        );
    }
    rows
}

/// Every leaf of the default config as TOML values, dotted (`network.bridge`); an empty
/// table is a leaf.
fn default_values() -> BTreeMap<String, toml::Value> {
    fn walk(prefix: &str, table: &toml::Table, out: &mut BTreeMap<String, toml::Value>) {
        for (k, v) in table {
            match v {
                toml::Value::Table(t) if !t.is_empty() => walk(&format!("{prefix}{k}."), t, out),
                _ => {
                    out.insert(format!("{prefix}{k}"), v.clone());
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    match toml::Value::try_from(ConfigFile::default()) {
        Ok(toml::Value::Table(t)) => walk("", &t, &mut out),
        other => panic!("the default config as TOML: {other:?}"),
    }
    out
}

#[test]
fn every_config_key_is_documented_with_its_default() {
    let page = docs()
        .into_iter()
        .find(|d| d.path == "docs/configuration.md")
        .expect("docs/configuration.md");
    let rows = key_rows(&page.text);
    let accepted = keys::accepted_keys();
    for key in &accepted {
        assert!(
            rows.contains_key(key),
            "docs/configuration.md has no row for `{key}`, which the config accepts: add \
             `| `{key}` | type | default | what it does |`"
        );
    }
    for key in rows.keys() {
        assert!(
            accepted.contains(key),
            "docs/configuration.md documents `{key}`, which the config does not accept \
             (renamed or removed?)"
        );
    }
    let defaults = default_values();
    for (key, cell) in &rows {
        let Some(want) = defaults.get(key) else {
            continue;
        };
        let literal = cell.trim_matches('`');
        let got = toml::from_str::<toml::Table>(&format!("v = {literal}"))
            .ok()
            .and_then(|mut t| t.remove("v"));
        assert_eq!(
            got.as_ref(),
            Some(want),
            "docs/configuration.md: the default of `{key}` is documented as {cell}, the \
             daemon's is `{want}`"
        );
    }
}

/// `line` split into words as a shell would (quotes removed; no expansions).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_with(String::new).push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, '#') if word.is_none() => break,
            (None, c) if c.is_whitespace() => out.extend(word.take()),
            (None, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    out.extend(word);
    out
}

/// The commands of a shell line (split at `&&`, `||`, `|`, `;`, `&`) that run bosun, without
/// the environment assignments before them.
fn bosun_commands(line: &str) -> Vec<Vec<String>> {
    let mut commands = vec![Vec::new()];
    for w in words(line) {
        let (word, ends) = match w.strip_suffix(';') {
            _ if ["&&", "||", "|", ";", "&"].contains(&w.as_str()) => (None, true),
            Some(w) => (Some(w.to_string()), true),
            None => (Some(w), false),
        };
        if let (Some(word), Some(command)) = (word, commands.last_mut()) {
            command.push(word);
        }
        if ends {
            commands.push(Vec::new());
        }
    }
    commands
        .into_iter()
        .map(|c| {
            c.into_iter()
                .skip_while(|w| w == "sudo" || (w.contains('=') && !w.starts_with('-')))
                .collect::<Vec<_>>()
        })
        .filter(|c| {
            c.first()
                .is_some_and(|w| w == "bosun" || w.ends_with("/bosun"))
        })
        .collect()
}

/// The concrete command lines a synopsis stands for: `[…]` optional (all in, or all out), `a|b`
/// alternatives (each one in some line), `N` a number, `CMD...` one word.
fn expand(synopsis: &[String]) -> Vec<Vec<String>> {
    let alternatives = synopsis
        .iter()
        .map(|w| w.split('|').count())
        .max()
        .unwrap_or(1);
    let mut out = Vec::new();
    for with_optional in [true, false] {
        for pick in 0..alternatives {
            let mut line = Vec::new();
            let mut depth = 0usize;
            for w in synopsis {
                let opens = w.chars().take_while(|&c| c == '[').count();
                let closes = w.chars().rev().take_while(|&c| c == ']').count();
                depth += opens;
                let core = w.trim_start_matches('[').trim_end_matches(']');
                if (depth == 0 || with_optional) && !core.is_empty() {
                    let alts: Vec<&str> = core.split('|').collect();
                    let word = alts[pick.min(alts.len() - 1)].trim_end_matches("...");
                    line.push(if word == "N" { "1" } else { word }.to_string());
                }
                depth = depth.saturating_sub(closes);
            }
            if !out.contains(&line) {
                out.push(line);
            }
        }
    }
    out
}

/// Why the CLI's parser refuses `argv` (None: it takes it, or `argv` runs an internal
/// subcommand). `partial`: a command named in prose, which may leave out its arguments.
fn refusal(argv: &[String], partial: bool) -> Option<String> {
    if argv
        .get(1)
        .is_some_and(|w| INTERNAL_SUBCOMMANDS.contains(&w.as_str()))
    {
        return None;
    }
    let e = Cli::try_parse_from(argv).err()?;
    let fine = match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => true,
        ErrorKind::MissingRequiredArgument
        | ErrorKind::MissingSubcommand
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => partial,
        _ => false,
    };
    (!fine).then(|| e.render().to_string())
}

/// Every `bosun …` command in the docs that the CLI refuses: `file:line: command: why`.
fn refused_commands() -> (usize, Vec<String>) {
    let mut checked = 0;
    let mut bad = Vec::new();
    for doc in docs() {
        let (blocks, prose) = split_fences(&doc.text);
        let mut lines = Vec::new();
        for b in blocks
            .iter()
            .filter(|b| ["sh", "bash", "shell", "console"].contains(&b.lang.as_str()))
        {
            let text = b.text.replace("\\\n", " ");
            lines.extend(
                text.lines()
                    .enumerate()
                    .map(|(i, l)| (b.line + i, l.to_string(), false)),
            );
        }
        lines.extend(
            code_spans(&prose)
                .into_iter()
                .filter(|(_, s)| s.starts_with("bosun "))
                .map(|(n, s)| (n, s, true)),
        );
        for (n, line, partial) in lines {
            for command in bosun_commands(&line) {
                for argv in expand(&command) {
                    checked += 1;
                    if let Some(why) = refusal(&argv, partial) {
                        bad.push(format!("{}:{n}: {}: {why}", doc.path, argv.join(" ")));
                    }
                }
            }
        }
    }
    (checked, bad)
}

#[test]
fn every_documented_bosun_command_parses_with_the_cli() {
    let (checked, bad) = refused_commands();
    assert!(checked >= 20, "only {checked} bosun command lines found");
    assert!(
        bad.is_empty(),
        "documented commands the CLI refuses:\n{}",
        bad.join("\n")
    );
}

/// GitHub's anchor of a heading: lower case, spaces to `-`, other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim_start_matches('#')
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn every_link_between_the_pages_finds_its_page_and_heading() {
    let docs = docs();
    let mut bad = Vec::new();
    for doc in &docs {
        let dir = std::path::Path::new(&doc.path)
            .parent()
            .unwrap_or(std::path::Path::new(""));
        let (_, prose) = split_fences(&doc.text);
        for target in prose
            .split("](")
            .skip(1)
            .filter_map(|t| t.split(')').next())
        {
            if target.contains("://") {
                continue;
            }
            let (file, heading) = target.split_once('#').unwrap_or((target, ""));
            let path = dir.join(file).display().to_string();
            let found = docs.iter().find(|d| d.path == path);
            let ok = found.is_some_and(|d| {
                heading.is_empty()
                    || split_fences(&d.text)
                        .1
                        .lines()
                        .any(|l| l.starts_with('#') && anchor(l) == heading)
            });
            if !ok {
                bad.push(format!("{}: ]({target})", doc.path));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "links to no page or heading:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_checkers_catch_what_they_must() {
    let (blocks, prose) = split_fences("a `bosun pod` b\n```toml\nx = 1\n```\n`bosun x`\n");
    assert_eq!(blocks.len(), 1);
    assert_eq!((blocks[0].lang.as_str(), blocks[0].line), ("toml", 3));
    assert_eq!(
        code_spans(&prose),
        [(1, "bosun pod".to_string()), (5, "bosun x".to_string())]
    );
    assert!(
        Config::parse("sockett = \"/x\"\n").is_err(),
        "a renamed key"
    );
    assert_eq!(
        bosun_commands("X=1 bosun daemon & bosun pod get -o wide && sleep 5 # bosun x"),
        [
            vec!["bosun", "daemon"],
            vec!["bosun", "pod", "get", "-o", "wide"]
        ]
    );
    let lines = expand(&words(
        "bosun pod get [NAME] [-o wide|json] [--grace-period N]",
    ));
    assert!(lines.contains(&words("bosun pod get NAME -o json --grace-period 1")));
    assert!(lines.contains(&words("bosun pod get")));
    assert!(refusal(&words("bosun pod aply -f web.yaml"), false).is_some());
    assert!(refusal(&words("bosun pod get --output wider"), false).is_some());
    assert!(refusal(&words("bosun pod describe"), false).is_some());
    assert!(refusal(&words("bosun pod describe"), true).is_none());
    assert!(refusal(&words("bosun monitor --standby"), false).is_none());
    assert_eq!(
        anchor("## The VM lane: cgroup v2 and systemd (`hack/vm`)"),
        "the-vm-lane-cgroup-v2-and-systemd-hackvm"
    );
}
