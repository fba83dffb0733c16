//! CNI network configs: parsing `.conflist`/`.conf` files, picking the conf dir's winner, and
//! building each plugin's stdin (name, cniVersion, prevResult, capability-filtered runtimeConfig).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// File extensions libcni reads (`.conf`/`.json`: one plugin; `.conflist`: a chain).
pub const EXTENSIONS: [&str; 3] = ["conflist", "conf", "json"];

/// The runtimeConfig capabilities bosun can fill in.
pub const CAPABILITIES: [&str; 4] = ["portMappings", "dns", "bandwidth", "ips"];

/// A network: a named chain of plugin configs sharing one CNI version.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkList {
    /// `name`.
    pub name: String,
    /// `cniVersion`.
    pub cni_version: String,
    /// `disableCheck`.
    pub disable_check: bool,
    /// The plugins' configs, in ADD order (each has a string `type`).
    pub plugins: Vec<Map<String, Value>>,
    /// The whole list as JSON (what is recorded for DEL).
    pub raw: Value,
}

impl NetworkList {
    /// Parses a `.conflist` (`conflist`: true) or a single-plugin `.conf`.
    pub fn parse(bytes: &[u8], conflist: bool) -> Result<NetworkList> {
        let v: Value =
            serde_json::from_slice(bytes).map_err(|e| Error::invalid(format!("bad JSON: {e}")))?;
        let obj = v
            .as_object()
            .ok_or_else(|| Error::invalid("not a JSON object"))?;
        let name = obj.get("name").and_then(Value::as_str).unwrap_or_default();
        if name.is_empty() {
            return Err(Error::invalid("no network name"));
        }
        let cni_version = obj
            .get("cniVersion")
            .and_then(Value::as_str)
            .unwrap_or("0.1.0")
            .to_string();
        let plugins: Vec<Map<String, Value>> = if conflist {
            let list = obj
                .get("plugins")
                .and_then(Value::as_array)
                .ok_or_else(|| Error::invalid("no \"plugins\" list"))?;
            list.iter()
                .map(|p| {
                    p.as_object()
                        .cloned()
                        .ok_or_else(|| Error::invalid("a plugin is not an object"))
                })
                .collect::<Result<_>>()?
        } else {
            vec![obj.clone()]
        };
        if plugins.is_empty() {
            return Err(Error::invalid("the plugin list is empty"));
        }
        for (i, p) in plugins.iter().enumerate() {
            let t = p.get("type").and_then(Value::as_str).unwrap_or_default();
            if t.is_empty() || t.contains('/') || t.starts_with('.') {
                return Err(Error::invalid(format!(
                    "plugin {i}: bad or missing \"type\" {t:?}"
                )));
            }
        }
        let raw = if conflist {
            v.clone()
        } else {
            serde_json::json!({"cniVersion": cni_version, "name": name, "plugins": [v.clone()]})
        };
        Ok(NetworkList {
            name: name.to_string(),
            cni_version,
            disable_check: obj
                .get("disableCheck")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            plugins,
            raw,
        })
    }

    /// A list back from its recorded JSON (always in conflist form).
    pub fn from_raw(raw: &Value) -> Result<NetworkList> {
        NetworkList::parse(raw.to_string().as_bytes(), true)
    }

    /// Plugin `i`'s type.
    pub fn plugin_type(&self, i: usize) -> &str {
        self.plugins
            .get(i)
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// Whether CHECK exists for this version (0.4.0 and later) and is not disabled.
    pub fn supports_check(&self) -> bool {
        !self.disable_check
            && !matches!(
                self.cni_version.as_str(),
                "0.1.0" | "0.2.0" | "0.3.0" | "0.3.1"
            )
    }

    /// Plugin `i`'s stdin: its config with the list's `name` and `cniVersion`, `prevResult`
    /// when given, and `runtimeConfig` holding only the capabilities the plugin declares
    /// (`"capabilities": {"portMappings": true}`) and `runtime` has a value for.
    pub fn plugin_stdin(
        &self,
        i: usize,
        prev: Option<&Value>,
        runtime: &Map<String, Value>,
    ) -> Value {
        let mut conf = self.plugins.get(i).cloned().unwrap_or_default();
        conf.insert("name".into(), Value::String(self.name.clone()));
        conf.insert("cniVersion".into(), Value::String(self.cni_version.clone()));
        if let Some(prev) = prev {
            conf.insert("prevResult".into(), prev.clone());
        }
        let rc = runtime_config(&conf, runtime);
        if rc.is_empty() {
            conf.remove("runtimeConfig");
        } else {
            conf.insert("runtimeConfig".into(), Value::Object(rc));
        }
        Value::Object(conf)
    }
}

/// The capability values `plugin` declares, taken from `runtime`.
pub fn runtime_config(
    plugin: &Map<String, Value>,
    runtime: &Map<String, Value>,
) -> Map<String, Value> {
    let declared = plugin.get("capabilities").and_then(Value::as_object);
    let mut out = Map::new();
    for cap in CAPABILITIES {
        let on = declared
            .and_then(|d| d.get(cap))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if let (true, Some(v)) = (on, runtime.get(cap)) {
            out.insert(cap.to_string(), v.clone());
        }
    }
    out
}

/// The config files in `dir`, sorted by name (lowest first); a missing dir has none.
pub fn config_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::internal(format!("read {}: {e}", dir.display()))),
    };
    let mut files: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension()
                .and_then(|x| x.to_str())
                .is_some_and(|x| EXTENSIONS.contains(&x))
                && p.is_file()
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Loads one config file (its extension says list or single plugin); errors name the file.
pub fn load_file(path: &Path) -> Result<NetworkList> {
    let bytes = std::fs::read(path)
        .map_err(|e| Error::invalid(format!("CNI config {}: {e}", path.display())))?;
    let conflist = path.extension().and_then(|x| x.to_str()) == Some("conflist");
    NetworkList::parse(&bytes, conflist)
        .map_err(|e| e.context(format!("CNI config {}", path.display())))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn conflist_and_single_conf_parse_to_lists() {
        let l = NetworkList::parse(
            br#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge"},{"type":"portmap"}]}"#,
            true,
        )
        .expect("conflist");
        assert_eq!((l.name.as_str(), l.plugins.len()), ("n", 2));
        assert_eq!(l.plugin_type(1), "portmap");
        assert!(l.supports_check());
        let c = NetworkList::parse(
            br#"{"cniVersion":"0.3.1","name":"c","type":"bridge"}"#,
            false,
        )
        .expect("conf");
        assert_eq!(c.plugins.len(), 1);
        assert!(!c.supports_check(), "0.3.1 has no CHECK");
        assert_eq!(
            NetworkList::from_raw(&c.raw).expect("raw").plugins,
            c.plugins
        );
        for (bad, why) in [
            (&b"{"[..], "bad JSON"),
            (br#"{"plugins":[{"type":"x"}]}"#, "no network name"),
            (br#"{"name":"n","plugins":[]}"#, "empty"),
            (br#"{"name":"n","plugins":[{"type":"../x"}]}"#, "type"),
        ] {
            let e = NetworkList::parse(bad, true).expect_err(why);
            assert!(e.to_string().contains(why), "{e}");
        }
    }

    #[test]
    fn lowest_file_name_wins_and_other_files_are_ignored() {
        let dir = tempfile::tempdir().expect("tmp");
        assert!(config_files(&dir.path().join("missing"))
            .expect("missing")
            .is_empty());
        for name in ["20-b.conflist", "10-a.conf", "05-x.txt", "99-z.json"] {
            std::fs::write(dir.path().join(name), "{}").expect("write");
        }
        std::fs::create_dir(dir.path().join("00-dir.conf")).expect("dir");
        let names: Vec<String> = config_files(dir.path())
            .expect("list")
            .iter()
            .map(|p| {
                p.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert_eq!(names, ["10-a.conf", "20-b.conflist", "99-z.json"]);
        let e = load_file(&dir.path().join("10-a.conf")).expect_err("no name");
        assert!(e.to_string().contains("10-a.conf"), "{e}");
    }

    #[test]
    fn stdin_gets_name_version_prev_result_and_only_declared_capabilities() {
        let l = NetworkList::parse(
            br#"{"cniVersion":"1.0.0","name":"n","plugins":[
                {"type":"bridge","runtimeConfig":{"stale":1}},
                {"type":"portmap","capabilities":{"portMappings":true,"dns":false}},
                {"type":"bandwidth","capabilities":{"bandwidth":true,"ips":true}}]}"#,
            true,
        )
        .expect("parse");
        let mut rt = Map::new();
        rt.insert("portMappings".into(), json!([{"hostPort": 80}]));
        rt.insert("dns".into(), json!({"servers": ["1.1.1.1"]}));
        rt.insert("bandwidth".into(), json!({"ingressRate": 1}));
        let prev = json!({"cniVersion":"1.0.0","ips":[]});
        let s0 = l.plugin_stdin(0, None, &rt);
        assert_eq!(s0["name"], "n");
        assert_eq!(s0["cniVersion"], "1.0.0");
        assert!(s0.get("prevResult").is_none());
        assert!(
            s0.get("runtimeConfig").is_none(),
            "no capability declared: {s0}"
        );
        let s1 = l.plugin_stdin(1, Some(&prev), &rt);
        assert_eq!(s1["prevResult"], prev);
        assert_eq!(
            s1["runtimeConfig"],
            json!({"portMappings": [{"hostPort": 80}]})
        );
        let s2 = l.plugin_stdin(2, Some(&prev), &rt);
        // ips is declared but there is no value for it: left out.
        assert_eq!(
            s2["runtimeConfig"],
            json!({"bandwidth": {"ingressRate": 1}})
        );
    }
}
