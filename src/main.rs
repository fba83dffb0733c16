//! The bosun binary: daemon and CLI subcommands.

use clap::Parser;

use bosun::cli::{self, Cli, Command};

fn main() -> std::process::ExitCode {
    // The per-container monitor forks: it must run before any runtime or thread exists.
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new("monitor")) {
        std::process::exit(bosun::monitor::main(std::env::args_os().skip(2).collect()));
    }
    // Sandbox helpers: short-lived, single-threaded children of the daemon (see sandbox/).
    match std::env::args_os()
        .nth(1)
        .as_deref()
        .and_then(|a| a.to_str())
    {
        Some("pinns") => std::process::exit(bosun::sandbox::pinns::main(
            std::env::args_os().skip(2).collect(),
        )),
        Some("pod-init") => std::process::exit(bosun::sandbox::init::main(
            std::env::args_os().skip(2).collect(),
        )),
        _ => {}
    }
    // containerd's CLI, when this binary is called `ctr` (a link kind's and CI's scripts find).
    let argv0 = std::env::args_os().next().unwrap_or_default();
    if std::path::Path::new(&argv0).file_name() == Some(std::ffi::OsStr::new("ctr")) {
        std::process::exit(cli::ctr::main(std::env::args_os().skip(1).collect()));
    }
    let cli = Cli::parse();
    if let Command::Ctr { args } = cli.command {
        std::process::exit(cli::ctr::main(args));
    }
    // systemd's readiness socket, taken out of the environment while this process is still
    // single-threaded (nothing the daemon spawns may inherit it).
    let notifier = match cli.command {
        Command::Daemon(_) => bosun::daemon::notify::Notifier::take_from_env(),
        _ => None,
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bosun: start tokio runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let socket = cli::client_socket(&cli);
    let result: anyhow::Result<()> = rt.block_on(async {
        match cli.command {
            Command::Daemon(ref args) => {
                let config = args.resolve(cli.socket.clone())?;
                bosun::daemon::logging::init(&config.log_level, config.log_format);
                bosun::daemon::run(config, notifier)
                    .await
                    .map_err(anyhow::Error::from)
            }
            Command::Image(cmd) => cli::image::run(socket, cmd).await,
            Command::Pod(cmd) => cli::pod::run(socket, cmd).await,
            Command::Node(cmd) => cli::node::run(socket, cmd).await,
            Command::Version => cli::version(&socket).await,
            Command::Exec(args) => cli::stream::exec(socket, args).await,
            Command::Attach(args) => cli::stream::attach(socket, args).await,
            Command::PortForward(args) => cli::stream::port_forward(socket, args).await,
            // Ran above, before any runtime existed.
            Command::Ctr { .. } => Ok(()),
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            if let Some(io) = e.downcast_ref::<std::io::Error>() {
                if io.kind() == std::io::ErrorKind::BrokenPipe {
                    // `bosun image ls | head`: the reader left, which is not an error of ours.
                    return std::process::ExitCode::SUCCESS;
                }
            }
            match e.downcast_ref::<tonic::Status>() {
                Some(st) => match cli::status_hint(st.code()) {
                    Some(hint) => eprintln!("bosun: {} ({:?}); {hint}", st.message(), st.code()),
                    None => eprintln!("bosun: {} ({:?})", st.message(), st.code()),
                },
                None => eprintln!("bosun: {e:#}"),
            }
            std::process::ExitCode::FAILURE
        }
    }
}
