//! `ctr images pull -u user`: the password asked for on the terminal, not echoed.

use std::io::{BufRead, Write};
use std::os::fd::AsFd;

/// Asks for a password on stderr and reads one line from stdin, with echo off while stdin is
/// a terminal.
pub fn prompt() -> anyhow::Result<String> {
    eprint!("Password: ");
    std::io::stderr().flush()?;
    let stdin = std::io::stdin();
    let saved = rustix::termios::isatty(stdin.as_fd())
        .then(|| rustix::termios::tcgetattr(stdin.as_fd()).ok())
        .flatten();
    if let Some(t) = &saved {
        let mut quiet = t.clone();
        quiet.local_modes.remove(rustix::termios::LocalModes::ECHO);
        let _ = rustix::termios::tcsetattr(
            stdin.as_fd(),
            rustix::termios::OptionalActions::Now,
            &quiet,
        );
    }
    let mut line = String::new();
    let read = stdin.lock().read_line(&mut line);
    if let Some(t) = &saved {
        let _ = rustix::termios::tcsetattr(stdin.as_fd(), rustix::termios::OptionalActions::Now, t);
        eprintln!();
    }
    read?;
    Ok(line.trim_end_matches(['\n', '\r']).to_string())
}
