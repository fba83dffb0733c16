//! grpc-health: a tiny grpc.health.v1 server for bosun's grpc probe tests (built into the `grpc-health` test image).
//!
//! `grpc-health [--port 50051] [--service NAME]...` answers SERVING for "" and every named
//! service, NOT_SERVING while `/tmp/health-status` (re-read on each call) says `NOT_SERVING`,
//! and SERVICE_UNKNOWN for other names. SIGTERM or SIGINT stop it with exit 0.

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

/// The file that flips the answer (so tests can make the probe fail with an exec).
const STATUS_FILE: &str = "/tmp/health-status";

struct Server {
    services: HashSet<String>,
    status_file: PathBuf,
}

/// The answer for `service`, given what the status file holds.
fn status_for(services: &HashSet<String>, status_file: &Path, service: &str) -> ServingStatus {
    if !service.is_empty() && !services.contains(service) {
        return ServingStatus::ServiceUnknown;
    }
    match std::fs::read_to_string(status_file) {
        Ok(s) if s.trim() == "NOT_SERVING" => ServingStatus::NotServing,
        _ => ServingStatus::Serving,
    }
}

type WatchStream = Pin<Box<dyn futures::Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Health for Server {
    async fn check(
        &self,
        req: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let service = req.into_inner().service;
        let status = status_for(&self.services, &self.status_file, &service);
        if status == ServingStatus::ServiceUnknown {
            return Err(Status::not_found(format!("unknown service {service:?}")));
        }
        Ok(Response::new(HealthCheckResponse {
            status: status as i32,
        }))
    }

    type WatchStream = WatchStream;

    /// Sends the status now and whenever it changes (polled every 500 ms).
    async fn watch(
        &self,
        req: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let service = req.into_inner().service;
        let (services, file) = (self.services.clone(), self.status_file.clone());
        let stream = futures::stream::unfold(None, move |last: Option<ServingStatus>| {
            let (services, file, service) = (services.clone(), file.clone(), service.clone());
            async move {
                loop {
                    let now = status_for(&services, &file, &service);
                    if last != Some(now) {
                        let resp = HealthCheckResponse { status: now as i32 };
                        return Some((Ok(resp), Some(now)));
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }
}

fn args() -> Result<(u16, HashSet<String>), String> {
    let mut port = 50051;
    let mut services = HashSet::new();
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--port" => {
                let v = it.next().ok_or("--port needs a value")?;
                port = v.parse().map_err(|e| format!("--port {v}: {e}"))?;
            }
            "--service" => {
                services.insert(it.next().ok_or("--service needs a value")?);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok((port, services))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let (port, services) = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("grpc-health: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let server = Server {
        services,
        status_file: PathBuf::from(STATUS_FILE),
    };
    let addr = SocketAddr::from((Ipv4Addr::UNSPECIFIED, port));
    println!("grpc-health: serving grpc.health.v1 on {addr}");
    let stop = async {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        println!("grpc-health: stopping");
    };
    match tonic::transport::Server::builder()
        .add_service(HealthServer::new(server))
        .serve_with_shutdown(addr, stop)
        .await
    {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("grpc-health: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_follows_the_file_and_known_services() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("status");
        let services: HashSet<String> = ["checkout".to_string()].into();
        assert_eq!(status_for(&services, &file, ""), ServingStatus::Serving);
        assert_eq!(
            status_for(&services, &file, "checkout"),
            ServingStatus::Serving
        );
        assert_eq!(
            status_for(&services, &file, "other"),
            ServingStatus::ServiceUnknown
        );
        std::fs::write(&file, "NOT_SERVING\n").expect("write");
        assert_eq!(
            status_for(&services, &file, "checkout"),
            ServingStatus::NotServing
        );
        std::fs::write(&file, "SERVING").expect("write");
        assert_eq!(status_for(&services, &file, ""), ServingStatus::Serving);
    }
}
