//! The supervisor's `relay` role: a sandbox has no network but its own loopback, and a program
//! inside that must reach one service of the host (an agent's model gateway) gets it this way. The
//! host's service listens on a Unix socket that is mounted into the sandbox; this role listens on
//! a TCP port of the sandbox's loopback, joins each connection to a new connection to that socket,
//! runs the command, and exits with the command's status. Nothing else of the host is reachable:
//! the socket is the only way out, and it leads to the one service.

use std::ffi::OsString;
use std::io;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitCode};

/// The role's name, the supervisor binary's first argument.
pub(crate) const RELAY_ROLE: &str = "relay";

/// Where the host's socket is mounted in the sandbox.
pub(crate) const RELAY_SOCKET_GUEST: &str = "/run/faultline-relay.sock";

/// The arguments of the role before the command: `--listen 127.0.0.1:PORT --to SOCKET --`.
pub(crate) fn args(port: u16) -> Vec<String> {
    vec![
        RELAY_ROLE.to_string(),
        "--listen".to_string(),
        format!("127.0.0.1:{port}"),
        "--to".to_string(),
        RELAY_SOCKET_GUEST.to_string(),
        "--".to_string(),
    ]
}

/// Runs the role: `args` are what follows the role's name.
pub(crate) fn main(args: &[OsString]) -> ExitCode {
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("faultline-supervisor relay: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &[OsString]) -> io::Result<ExitCode> {
    let text: Vec<&str> = args
        .iter()
        .map(|a| {
            a.to_str()
                .ok_or_else(|| io::Error::other("arguments must be UTF-8"))
        })
        .collect::<io::Result<_>>()?;
    let ["--listen", listen, "--to", socket, "--", program, rest @ ..] = text.as_slice() else {
        return Err(io::Error::other(
            "usage: relay --listen ADDRESS --to SOCKET -- COMMAND...",
        ));
    };
    let listener = TcpListener::bind(listen)
        .map_err(|e| io::Error::other(format!("cannot listen on {listen}: {e}")))?;
    let socket = socket.to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let socket = socket.clone();
            std::thread::spawn(move || join(stream, &socket));
        }
    });
    let status = Command::new(program)
        .args(rest)
        .status()
        .map_err(|e| io::Error::other(format!("cannot run {program:?}: {e}")))?;
    let code = status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1);
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

/// Copies bytes both ways between a client and a new connection to the socket until each side
/// has closed its half.
fn join(client: TcpStream, socket: &str) {
    let Ok(service) = UnixStream::connect(socket) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let (Ok(mut client_read), Ok(mut service_write)) = (client.try_clone(), service.try_clone())
    else {
        return;
    };
    let upstream = std::thread::spawn(move || {
        let _ = io::copy(&mut client_read, &mut service_write);
        let _ = service_write.shutdown(Shutdown::Write);
    });
    let (mut service_read, mut client_write) = (service, client);
    let _ = io::copy(&mut service_read, &mut client_write);
    let _ = client_write.shutdown(Shutdown::Write);
    let _ = upstream.join();
}
