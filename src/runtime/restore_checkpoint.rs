//! CreateContainer from a checkpoint (an archive path or a checkpoint image, as CRI-O and containerd accept): checked, extracted and made a CREATED container whose StartContainer is `runc restore` under its monitor.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::checkpoint_restore_archive::{self as archive, Extracted};
use super::service::Runtime;
use super::state::meta::{ContainerMeta, NewContainer, SandboxEntry};
use super::state::paths;
use crate::error::{Error, Result, ResultExt};
use crate::image::index::ImageRecord;

/// Manifest annotations that mark an image as a checkpoint (its one layer holds the
/// archive's files): CRI-O's and containerd's key (checkpointctl's `CheckpointAnnotationName`,
/// what `buildah config --annotation` writes) and the `org.criu` key of `checkpointctl build`.
pub const CHECKPOINT_ANNOTATIONS: [&str; 2] = [
    "io.kubernetes.cri-o.annotations.checkpoint.name",
    "org.criu.checkpoint.container.name",
];

/// The directory under the root where checkpoints are extracted before their container is
/// recorded (emptied at start).
pub(super) const STAGING: &str = "checkpoint-restore";

/// The CRIU configuration file of a restore (in its restore directory).
const CRIU_CONF: &str = "criu.conf";

/// Where a checkpoint comes from.
pub enum Source {
    /// An archive file (CreateContainer's image is its absolute path).
    Archive(PathBuf),
    /// A checkpoint image in the store.
    Image(Arc<ImageRecord>),
}

impl Source {
    fn name(&self) -> String {
        match self {
            Source::Archive(p) => crate::error::echo_path(p),
            Source::Image(r) => r.repo_tags.first().cloned().unwrap_or(r.id.to_string()),
        }
    }
}

impl Runtime {
    /// The checkpoint CreateContainer's `image` names, if it names one: an absolute path to an
    /// existing file, or an image in the store carrying a checkpoint annotation. Cheap: the
    /// archive is not read here.
    pub(super) fn checkpoint_source(&self, image: &str) -> Option<Source> {
        let path = Path::new(image);
        if path.is_absolute() {
            return path.is_file().then(|| Source::Archive(path.to_path_buf()));
        }
        let rec = self.images.lookup(image)?;
        // A checkpoint image is one layer with nothing to run: any other image is not read.
        let run = &rec.config.config;
        if rec.layers.len() != 1 || run.cmd.is_some() || run.entrypoint.is_some() {
            return None;
        }
        let manifest = self.images.content().read(&rec.manifest_digest).ok()?;
        let manifest: crate::image::manifest::Manifest = serde_json::from_slice(&manifest).ok()?;
        CHECKPOINT_ANNOTATIONS
            .iter()
            .any(|k| manifest.annotations.contains_key(*k))
            .then_some(Source::Image(rec))
    }

    /// CreateContainer from checkpoint `source`: extracted (streaming, off the async path)
    /// into a staging directory, checked, then created as any container from the original
    /// image with the checkpointed process; the staging directory becomes the container's
    /// restore directory. Refusals (nothing left behind): members missing or escaping
    /// (InvalidArgument), another runtime handler, a bind mount not given again, a terminal,
    /// a shared PID or user namespace, the original image absent, CRIU unusable
    /// (FailedPrecondition, each naming what).
    pub(super) async fn create_restored(
        self: &Arc<Self>,
        sandbox: &SandboxEntry,
        mut new: NewContainer,
        source: Source,
    ) -> Result<String> {
        let name = source.name();
        let cname = new.request.name.clone();
        let staging = self
            .layout
            .durable
            .join(STAGING)
            .join(format!("{:016x}", rand::random::<u64>()));
        let made = {
            let (staging, name) = (staging.clone(), name.clone());
            let layer = match &source {
                Source::Image(rec) => rec
                    .chain_ids()
                    .last()
                    .map(|c| self.images.snapshots().fs_path(c)),
                Source::Archive(_) => None,
            };
            tokio::task::spawn_blocking(move || -> Result<Extracted> {
                if let Some(parent) = staging.parent() {
                    std::fs::create_dir_all(parent)
                        .ctx(|| format!("create {}", parent.display()))?;
                }
                match (&source, layer) {
                    (Source::Archive(p), _) => archive::extract(p, &staging)?,
                    (Source::Image(_), Some(layer)) => {
                        archive::copy_layer(&name, &layer, &staging)?
                    }
                    (Source::Image(_), None) => {
                        return Err(Error::invalid(format!(
                            "checkpoint image {name:?} has no layer"
                        )))
                    }
                }
                archive::load(&name, &staging)
            })
            .await
            .map_err(|e| Error::internal(format!("restore task: {e}")))?
        };
        let result = match made {
            Ok(x) => match self.restore_request(sandbox, &mut new, &x, &name) {
                Ok(()) => self.create_container_with(sandbox.id(), new, Some(x)).await,
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        if staging.exists() {
            let s = staging.clone();
            let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(s)).await;
        }
        result.map_err(|e| e.context(format!("container config {cname:?}")))
    }

    /// Checks the checkpoint against the new sandbox and request, and turns the request into
    /// one for the original image running the checkpointed process.
    fn restore_request(
        &self,
        sandbox: &SandboxEntry,
        new: &mut NewContainer,
        x: &Extracted,
        source: &str,
    ) -> Result<()> {
        let refuse = |why: String| Error::precondition(format!("checkpoint {source}: {why}"));
        let pod_handler = self
            .handlers
            .recorded(&sandbox.meta().request.runtime_handler);
        let handler = pod_handler.name.clone();
        if !x.config.runtime.is_empty() && x.config.runtime != handler {
            return Err(refuse(format!(
                "made by runtime handler {:?}, but pod sandbox {} runs {handler:?}: a restore \
                 needs the same handler",
                x.config.runtime,
                sandbox.id()
            )));
        }
        let process = x.spec.process().clone().unwrap_or_default();
        if process.terminal().unwrap_or(false) || new.request.tty {
            return Err(refuse(
                "a container on a terminal (tty) cannot be restored: its console is not \
                 checkpointed"
                    .into(),
            ));
        }
        for ns in x
            .spec
            .linux()
            .iter()
            .flat_map(|l| l.namespaces().iter().flatten())
        {
            use oci_spec::runtime::LinuxNamespaceType as T;
            match ns.typ() {
                T::Pid if ns.path().is_some() => {
                    return Err(refuse(
                        "the container shared a PID namespace (pod or target): runc/CRIU \
                         restore only a container's own PID namespace"
                            .into(),
                    ))
                }
                T::User => {
                    return Err(refuse(
                        "the container ran in a user namespace: not restorable here".into(),
                    ))
                }
                _ => {}
            }
        }
        let given: Vec<String> = new
            .request
            .mounts
            .iter()
            .map(|m| crate::oci::spec::mounts::clean_path(&m.container_path))
            .collect();
        if let Some(missing) = archive::required_binds(&x.spec)
            .into_iter()
            .find(|d| !given.contains(d))
        {
            return Err(refuse(format!(
                "the container had a bind mount at {missing}; the request must mount {missing} \
                 again (CRIU restores open files there)"
            )));
        }
        let c = &x.config;
        let image = [&c.rootfs_image_ref, &c.rootfs_image_name, &c.rootfs_image]
            .into_iter()
            .filter(|k| !k.is_empty())
            .find_map(|k| self.images.lookup(k))
            .ok_or_else(|| {
                refuse(format!(
                    "its image {:?} ({}) is not on this node; pull it first",
                    c.rootfs_image_name, c.rootfs_image_ref
                ))
            })?;
        if self.host.criu.is_none() {
            return Err(refuse(self.host.criu_why.clone()));
        }
        if let Some(why) = &pod_handler.no_checkpoint {
            return Err(refuse(format!("runtime handler {handler:?}: {why}")));
        }
        let r = &mut new.request;
        r.image = image
            .repo_tags
            .first()
            .cloned()
            .unwrap_or(image.id.to_string());
        r.command = process.args().clone().unwrap_or_default();
        r.args = Vec::new();
        r.working_dir = Some(process.cwd().display().to_string());
        Ok(())
    }

    /// The last steps of a restored container's creation, after its rootfs is mounted and
    /// its bundle written: the checkpoint's rootfs changes, the checkpointed process in
    /// `config.json` (what CRIU restores: its args, env, cwd and user, for execs too), the
    /// extracted checkpoint moved to the container's restore directory and its
    /// `container.log` copied to the new log path.
    pub(super) async fn finish_restore(
        &self,
        id: &str,
        meta: &ContainerMeta,
        x: &Extracted,
    ) -> Result<()> {
        let (dir, state_dir) = (x.dir.clone(), meta.state_dir.clone());
        let target = self.layout.restore_dir(id);
        let process = x.spec.process().clone();
        // runc 1.1 gives CRIU the new container's cgroup as the restored tree's root on cgroup
        // v1 only; on v2 CRIU would put the processes back into the checkpointed container's
        // (old, removed) cgroup: a CRIU configuration file (runc's `org.criu.config`) says it.
        let cgroup_root = if self.host.cgroup_unified {
            crate::cgroups::path::container_dir(self.config.cgroup_driver, &meta.cgroups_path)
        } else {
            None
        };
        let criu_conf = target.join(CRIU_CONF);
        let log_path = meta.log_path.clone();
        tokio::task::spawn_blocking(move || -> Result<()> {
            archive::apply_rootfs(&dir, &paths::rootfs(&state_dir))?;
            let config = paths::bundle(&state_dir).join("config.json");
            let text = std::fs::read(&config).ctx(|| format!("read {}", config.display()))?;
            let mut spec: oci_spec::runtime::Spec = serde_json::from_slice(&text)
                .map_err(|e| Error::internal(format!("{}: {e}", config.display())))?;
            if cgroup_root.is_some() {
                let mut ann = spec.annotations().clone().unwrap_or_default();
                ann.insert("org.criu.config".into(), criu_conf.display().to_string());
                spec.set_annotations(Some(ann));
            }
            if let (Some(mut p), Some(old)) = (spec.process().clone(), process) {
                p.set_args(old.args().clone());
                p.set_env(old.env().clone());
                p.set_cwd(old.cwd().clone());
                p.set_user(old.user().clone());
                spec.set_process(Some(p));
            }
            let json = serde_json::to_vec(&spec)
                .map_err(|e| Error::internal(format!("encode config.json: {e}")))?;
            crate::store::atomic::write_atomic_nosync(&config, &json)?;
            std::fs::rename(&dir, &target)
                .ctx(|| format!("move {} to {}", dir.display(), target.display()))?;
            if let Some(root) = &cgroup_root {
                let conf = format!("cgroup-root {root}\n");
                std::fs::write(&criu_conf, conf)
                    .ctx(|| format!("write {}", criu_conf.display()))?;
            }
            // The log up to the checkpoint starts the new log (as CRI-O restores it): the
            // monitor appends what the restored process writes.
            let old_log = target.join(super::checkpoint_archive::CONTAINER_LOG);
            if !log_path.is_empty() && old_log.is_file() {
                // Whole records only: a line cut by the copy at checkpoint time would run into
                // the first record of the restored process.
                let mut text = std::fs::read(&old_log).ctx(|| "read the archive's log")?;
                text.truncate(text.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1));
                std::fs::write(&log_path, text).ctx(|| format!("write {log_path}"))?;
            }
            let work = crate::monitor::runc::restore_work(&target);
            std::fs::create_dir_all(&work).ctx(|| format!("create {}", work.display()))
        })
        .await
        .map_err(|e| Error::internal(format!("restore task: {e}")))?
    }

    /// The restore directory StartContainer hands the monitor, when container `id` was created
    /// from a checkpoint and not yet started.
    pub(super) fn restore_from(&self, id: &str) -> Option<PathBuf> {
        let dir = self.layout.restore_dir(id);
        crate::monitor::runc::restore_images(&dir)
            .is_dir()
            .then_some(dir)
    }

    /// After a restore: CRIU's images are not needed any more (hundreds of MiB); its logs stay
    /// until RemoveContainer.
    pub(super) fn restored(&self, id: &str, pid: u32) {
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        tracing::info!(container = %id, pid, cgroup = %cgroup.trim(), "container restored");
        let images = crate::monitor::runc::restore_images(&self.layout.restore_dir(id));
        tokio::task::spawn_blocking(move || {
            if let Err(e) = std::fs::remove_dir_all(&images) {
                tracing::warn!("restore: remove {}: {e}", images.display());
            }
        });
    }
}
