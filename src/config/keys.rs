//! Every key the config accepts, listed from one example that sets them all (for issue 30's test that each key is documented).

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::registry::HostConfig;
use super::ConfigFile;

/// What [`accepted_keys`] shows for the name of a registry host (`[registry.hosts."<host>"]`).
pub const HOST: &str = "<host>";

/// The handler [`example`] configures, shown as [`super::runtimes::NAME`].
const EXAMPLE_HANDLER: &str = "crun";

/// A config file that sets every key: the defaults, plus what they leave out of the TOML
/// (`node.eviction_hard`, and one registry host with every key of its table). It passes
/// [`ConfigFile::check`]. A new key that a default leaves out must be set here; a unit test
/// fails until it is.
pub fn example() -> ConfigFile {
    let mut c = ConfigFile::default();
    c.node.eviction_hard = Some(BTreeMap::new());
    c.registry.hosts.insert(
        HOST.to_string(),
        HostConfig {
            mirrors: vec!["https://mirror.example".to_string()],
            plain_http: Some(false),
            ca_file: Some(PathBuf::from("/etc/ssl/registry-ca.pem")),
            skip_verify: false,
        },
    );
    c.runtimes.insert(
        EXAMPLE_HANDLER.to_string(),
        super::RuntimeHandlerConfig {
            binary: PathBuf::from("/usr/bin/crun"),
            root: PathBuf::from("/run/bosun/runtimes/crun"),
            options: vec![],
            pod_overhead: Some(Default::default()),
        },
    );
    c
}

/// Every key the config accepts, dotted as in TOML (`socket`, `node.eviction_hard`,
/// `registry.hosts.<host>.mirrors`), sorted: the leaves of [`example`] written as TOML. A
/// table whose keys are the user's (`node.system_reserved`, the eviction maps) is one key.
pub fn accepted_keys() -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(toml::Value::Table(table)) = toml::Value::try_from(example()) {
        leaves("", &table, &mut out);
    }
    let handler = format!("runtimes.{EXAMPLE_HANDLER}.");
    for key in &mut out {
        if let Some(rest) = key.strip_prefix(&handler) {
            *key = format!("runtimes.{}.{rest}", super::runtimes::NAME);
        }
    }
    out.sort();
    out
}

fn leaves(prefix: &str, table: &toml::Table, out: &mut Vec<String>) {
    for (key, value) in table {
        let path = format!("{prefix}{key}");
        match value {
            toml::Value::Table(t) if !t.is_empty() => leaves(&format!("{path}."), t, out),
            _ => out.push(path),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde::de::{self, Deserialize, Deserializer, Visitor};

    use super::*;
    use crate::config::runtimes::PodOverhead;
    use crate::config::{
        Config, ImageConfig, NetworkConfig, NodeKeys, PodConfig, RegistryConfig,
        RuntimeHandlerConfig, StreamConfig,
    };

    /// A deserializer that only asks a struct for its field names.
    struct FieldNames(&'static [&'static str]);

    impl<'de> Deserializer<'de> for &mut FieldNames {
        type Error = de::value::Error;

        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not a struct"))
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            self.0 = fields;
            Err(de::Error::custom("fields read"))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }

    /// The keys `T` accepts, as serde decodes them.
    fn fields_of<T: for<'de> Deserialize<'de>>() -> &'static [&'static str] {
        let mut names = FieldNames(&[]);
        let _ = T::deserialize(&mut names);
        names.0
    }

    #[test]
    fn every_key_serde_accepts_is_listed() {
        let keys = accepted_keys();
        let host = format!("registry.hosts.{HOST}.");
        let handler = format!("runtimes.{}.", crate::config::runtimes::NAME);
        let overhead = format!("{handler}pod_overhead.");
        for (prefix, fields) in [
            ("", fields_of::<ConfigFile>()),
            ("image.", fields_of::<ImageConfig>()),
            ("network.", fields_of::<NetworkConfig>()),
            ("stream.", fields_of::<StreamConfig>()),
            ("pod.", fields_of::<PodConfig>()),
            ("node.", fields_of::<NodeKeys>()),
            ("registry.", fields_of::<RegistryConfig>()),
            (host.as_str(), fields_of::<HostConfig>()),
            (handler.as_str(), fields_of::<RuntimeHandlerConfig>()),
            (overhead.as_str(), fields_of::<PodOverhead>()),
        ] {
            assert!(!fields.is_empty(), "no fields under {prefix:?}");
            for field in fields {
                let key = format!("{prefix}{field}");
                let sub = format!("{key}.");
                assert!(
                    keys.iter().any(|k| *k == key || k.starts_with(&sub)),
                    "{key} is accepted but not listed: set it in keys::example()"
                );
            }
        }
        for key in [
            "socket",
            "node.eviction_hard",
            "registry.hosts.<host>.ca_file",
        ] {
            assert!(keys.iter().any(|k| k == key), "{key}: {keys:?}");
        }
    }

    #[test]
    fn the_example_passes_the_check() {
        let text = toml::to_string(&example()).expect("serialise");
        Config::parse(&text).expect("the example is a valid config");
    }
}
