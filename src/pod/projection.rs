//! Files of configMap, secret, downwardAPI and projected volumes, written atomically into the pod's volume dir.

use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path};

use k8s_openapi::api::core::v1::{DownwardAPIVolumeFile, KeyToPath, Volume};

use super::env::{self, EnvFacts, SourceKind, Sources};
use super::translate::PodContext;
use crate::error::{Error, Result};

/// The default file mode of projected files (0644).
const DEFAULT_MODE: u32 = 0o644;

/// One file to write: relative path, content, mode.
pub type File = (String, Vec<u8>, u32);

/// The files of volume `v` if it is a projected kind (configMap, secret, downwardAPI,
/// projected); `Ok(None)` for other kinds.
pub fn files(
    ctx: &PodContext,
    v: &Volume,
    sources: &Sources,
    facts: &EnvFacts,
) -> Result<Option<Vec<File>>> {
    let what = format!("pod {}: volume {}", ctx.key(), v.name);
    let ns = ctx.namespace();
    let bad = |m: String| Error::invalid(format!("{what}: {m}"));
    if let Some(cm) = &v.config_map {
        let mode = mode(cm.default_mode);
        let mut out = Vec::new();
        object(
            sources,
            SourceKind::ConfigMap,
            ns,
            &cm.name,
            cm.items.as_deref(),
            cm.optional,
            mode,
            &mut out,
        )
        .map_err(bad)?;
        return Ok(Some(out));
    }
    if let Some(s) = &v.secret {
        let mode = mode(s.default_mode);
        let name = s.secret_name.clone().unwrap_or_default();
        let mut out = Vec::new();
        object(
            sources,
            SourceKind::Secret,
            ns,
            &name,
            s.items.as_deref(),
            s.optional,
            mode,
            &mut out,
        )
        .map_err(bad)?;
        return Ok(Some(out));
    }
    if let Some(d) = &v.downward_api {
        let mode = mode(d.default_mode);
        let mut out = Vec::new();
        for item in d.items.iter().flatten() {
            out.push(downward(ctx, item, facts, mode).map_err(bad)?);
        }
        return Ok(Some(out));
    }
    if let Some(p) = &v.projected {
        let mode = mode(p.default_mode);
        let mut out = Vec::new();
        for (i, src) in p.sources.iter().flatten().enumerate() {
            if let Some(cm) = &src.config_map {
                object(
                    sources,
                    SourceKind::ConfigMap,
                    ns,
                    &cm.name,
                    cm.items.as_deref(),
                    cm.optional,
                    mode,
                    &mut out,
                )
                .map_err(bad)?;
            } else if let Some(s) = &src.secret {
                object(
                    sources,
                    SourceKind::Secret,
                    ns,
                    &s.name,
                    s.items.as_deref(),
                    s.optional,
                    mode,
                    &mut out,
                )
                .map_err(bad)?;
            } else if let Some(d) = &src.downward_api {
                for item in d.items.iter().flatten() {
                    out.push(downward(ctx, item, facts, mode).map_err(bad)?);
                }
            } else {
                return Err(bad(format!(
                    "projected source {i}: only configMap, secret and downwardAPI are supported \
                     on a node without an API server"
                )));
            }
        }
        return Ok(Some(out));
    }
    Ok(None)
}

fn mode(m: Option<i32>) -> u32 {
    m.map_or(DEFAULT_MODE, |m| (m as u32) & 0o777)
}

/// The keys of a ConfigMap/Secret as files (all keys, or the listed items).
#[allow(clippy::too_many_arguments)]
fn object(
    sources: &Sources,
    kind: SourceKind,
    ns: &str,
    name: &str,
    items: Option<&[KeyToPath]>,
    optional: Option<bool>,
    default_mode: u32,
    out: &mut Vec<File>,
) -> std::result::Result<(), String> {
    let keys = match sources.object(kind, ns, name).map_err(|e| e.to_string())? {
        Some(k) => k,
        None if optional == Some(true) => return Ok(()),
        None => {
            return Err(format!(
                "{} {ns}/{name} not found (under {})",
                kind.as_str(),
                sources.dir(kind, ns, name).display()
            ))
        }
    };
    match items {
        None => {
            for (k, v) in keys {
                out.push((k, v, default_mode));
            }
        }
        Some(items) => {
            for it in items {
                check_rel(&it.path)?;
                match keys.iter().find(|(k, _)| *k == it.key) {
                    Some((_, v)) => {
                        out.push((it.path.clone(), v.clone(), mode_or(it.mode, default_mode)))
                    }
                    None if optional == Some(true) => {}
                    None => {
                        return Err(format!(
                            "{} {ns}/{name} has no key {:?}",
                            kind.as_str(),
                            it.key
                        ))
                    }
                }
            }
        }
    }
    Ok(())
}

fn mode_or(m: Option<i32>, default: u32) -> u32 {
    m.map_or(default, |m| (m as u32) & 0o777)
}

fn downward(
    ctx: &PodContext,
    item: &DownwardAPIVolumeFile,
    facts: &EnvFacts,
    default_mode: u32,
) -> std::result::Result<File, String> {
    check_rel(&item.path)?;
    let value = if let Some(f) = &item.field_ref {
        if !f.field_path.starts_with("metadata.") {
            return Err(format!(
                "downwardAPI {}: only metadata fields can be files, not {:?}",
                item.path, f.field_path
            ));
        }
        env::field_ref(ctx, f, facts)?
    } else if let Some(r) = &item.resource_field_ref {
        let spec = ctx.pod.spec.as_ref().ok_or("no spec")?;
        let name = r.container_name.clone().unwrap_or_default();
        let c = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .find(|c| c.name == name)
            .ok_or_else(|| format!("downwardAPI {}: no container {name:?}", item.path))?;
        env::resource_ref(c, ctx, r)?
    } else {
        return Err(format!(
            "downwardAPI {}: fieldRef or resourceFieldRef is required",
            item.path
        ));
    };
    Ok((
        item.path.clone(),
        value.into_bytes(),
        mode_or(item.mode, default_mode),
    ))
}

/// A relative path inside a volume: no `..`, not absolute.
pub fn check_rel(p: &str) -> std::result::Result<(), String> {
    let path = Path::new(p);
    if p.is_empty()
        || path.is_absolute()
        || path
            .components()
            .any(|c| !matches!(c, Component::Normal(_)))
    {
        return Err(format!(
            "path {p:?} must be relative and must not contain '..'"
        ));
    }
    Ok(())
}

/// Writes `files` as the whole content of `dir`: a new `..data-N` directory is filled, then the
/// `..data` symlink is swapped to it (atomically, as the kubelet's AtomicWriter does), and
/// each top-level name is a symlink through `..data`. Containers see a consistent set.
pub fn write(dir: &Path, files: &[File]) -> Result<()> {
    let io = |what: &str, p: &Path, e: std::io::Error| {
        Error::internal(format!("{what} {}: {e}", p.display()))
    };
    std::fs::create_dir_all(dir).map_err(|e| io("create", dir, e))?;
    let stamp = crate::runtime::status::now_ns();
    let data = dir.join(format!("..data-{stamp}"));
    std::fs::create_dir_all(&data).map_err(|e| io("create", &data, e))?;
    for (rel, content, mode) in files {
        let p = data.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io("create", parent, e))?;
        }
        std::fs::write(&p, content).map_err(|e| io("write", &p, e))?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode))
            .map_err(|e| io("chmod", &p, e))?;
    }
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| io("chmod", &data, e))?;
    let tmp_link = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp_link);
    let target = data
        .file_name()
        .map(std::path::PathBuf::from)
        .unwrap_or_default();
    std::os::unix::fs::symlink(&target, &tmp_link).map_err(|e| io("symlink", &tmp_link, e))?;
    std::fs::rename(&tmp_link, dir.join("..data")).map_err(|e| io("rename", &tmp_link, e))?;
    let mut tops: Vec<String> = files
        .iter()
        .filter_map(|(rel, _, _)| rel.split('/').next().map(str::to_string))
        .collect();
    tops.sort();
    tops.dedup();
    for top in &tops {
        let link = dir.join(top);
        if std::fs::symlink_metadata(&link).is_ok() {
            continue;
        }
        std::os::unix::fs::symlink(Path::new("..data").join(top), &link)
            .map_err(|e| io("symlink", &link, e))?;
    }
    // Old generations and links of keys that are gone.
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let path = e.path();
            if name.starts_with("..data-") && path != data {
                let _ = std::fs::remove_dir_all(&path);
            } else if !name.starts_with("..") && !tops.contains(&name) {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    Ok(())
}
