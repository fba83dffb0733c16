//! Compiles the CRI and bosun protobuf schemas with protox (no protoc needed) and stamps the git commit.

use std::process::Command;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/runtime/v1/api.proto",
        "proto/bosun/v1/bosun.proto",
        "proto/bosun/v1/pods.proto",
    ];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;

    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=BOSUN_GIT_COMMIT={commit}");
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/refs/heads");
    Ok(())
}
