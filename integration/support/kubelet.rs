//! The real kubelet for trials: where it is, and whether it serves its authenticated port.

use std::io::Read;
use std::path::PathBuf;
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

use super::repo_root;

/// sha256 of kubelet builds known to start no authenticated server (the port where
/// `POST /checkpoint`, exec and logs live): `../shared/bin`'s v1.32.10-kubeedge1 build, whose
/// vendored `startKubelet` (KubeEdge's fork) leaves out upstream's `k.ListenAndServe` and so
/// serves only its read-only port, whatever `enableServer` says.
const WITHOUT_SERVER: &[&str] =
    &["3b666508a09d2b2849478c4f8235dc85f9aaf4035d305e4f87f00bae588e24fd"];

/// The kubelet: `$BOSUN_KUBELET`, else `../shared/bin/kubelet` from the repository root,
/// else in PATH.
pub fn kubelet_bin() -> Option<PathBuf> {
    std::env::var_os("BOSUN_KUBELET")
        .map(PathBuf::from)
        .into_iter()
        .chain(Some(repo_root().join("../shared/bin/kubelet")))
        .find(|p| p.is_file())
        .or_else(|| bosun::oci::host::find_in_path("kubelet"))
}

/// Why [`kubelet_bin`] cannot serve `POST /checkpoint` (it is absent, or a build known to
/// start no authenticated server), or None.
pub fn server_unmet() -> Option<String> {
    static WHY: OnceLock<Option<String>> = OnceLock::new();
    WHY.get_or_init(|| {
        let bin = kubelet_bin()?;
        let sum = match sha256(&bin) {
            Ok(sum) => sum,
            Err(e) => return Some(format!("cannot read {}: {e}", bin.display())),
        };
        WITHOUT_SERVER.contains(&sum.as_str()).then(|| {
            format!(
                "needs a kubelet serving its authenticated port (POST /checkpoint): {} \
                 (sha256 {}…) is ../shared/bin's v1.32.10-kubeedge1 build, whose startKubelet \
                 starts only the read-only server; BOSUN_KUBELET=<a kubelet that serves it> \
                 runs this trial (docs/checkpoint.md)",
                bin.display(),
                &sum[..12]
            )
        })
    })
    .clone()
}

fn sha256(path: &std::path::Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(format!("{:x}", h.finalize()))
}
