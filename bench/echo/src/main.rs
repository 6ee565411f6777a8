//! `echo --listen ADDR --cpus 0[,1...]`: one pinned glommio executor per CPU,
//! each accepting on ADDR (SO_REUSEPORT) and echoing PROTOCOL.md frames.
//!
//! It is the ceiling any server on this stack can reach: the same framing,
//! codec and runtime as routerd's gateway, and no routing, sessions or
//! objects. `bench/ping_vs_echo.sh` compares routerd's `ping` against it.

use std::net::SocketAddr;
use std::process::ExitCode;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use glommio::{LocalExecutorBuilder, Placement};
use wire::client::{encode_frame, FrameDecoder, FrameKind, Peer, DEFAULT_MAX_BODY};

/// Registered io memory per executor: locked memory is scarce (8 MiB).
const IO_MEMORY_BYTES: usize = 512 << 10;

/// Bytes of answers buffered per connection before they are written; a
/// read never yields more frames than fit the decoder, so this is reached
/// only with many tiny frames, and then the batch is flushed early.
const OUT_FLUSH_BYTES: usize = 64 << 10;

fn main() -> ExitCode {
    let (listen, cpus) = match parse_args() {
        Ok(parsed) => parsed,
        Err(message) => {
            eprintln!("echo: {message}\nusage: echo [--listen 127.0.0.1:7500] [--cpus 0,1]");
            return ExitCode::from(2);
        }
    };
    let mut handles = Vec::new();
    for cpu in cpus {
        let spawned = LocalExecutorBuilder::new(Placement::Fixed(cpu))
            .name("echo")
            .io_memory(IO_MEMORY_BYTES)
            .spawn(move || accept_loop(listen));
        match spawned {
            Ok(handle) => handles.push(handle),
            Err(error) => {
                eprintln!("echo: cannot start an executor on CPU {cpu}: {error}");
                return ExitCode::FAILURE;
            }
        }
    }
    eprintln!("echo: listening on {listen}");
    for handle in handles {
        let _ = handle.join();
    }
    ExitCode::SUCCESS
}

fn parse_args() -> Result<(SocketAddr, Vec<usize>), String> {
    let mut listen: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 7500));
    let mut cpus = vec![0];
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--listen" => listen = value.parse().map_err(|e| format!("--listen: {e}"))?,
            "--cpus" => {
                cpus = value
                    .split(',')
                    .map(|c| c.trim().parse().map_err(|e| format!("--cpus: {e}")))
                    .collect::<Result<_, _>>()?;
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok((listen, cpus))
}

async fn accept_loop(listen: SocketAddr) {
    let listener = match TcpListener::bind(listen) {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("echo: cannot bind {listen}: {error}");
            return;
        }
    };
    loop {
        match listener.accept().await {
            Ok(stream) => {
                glommio::spawn_local(serve(stream)).detach();
            }
            Err(error) => eprintln!("echo: accept: {error}"),
        }
    }
}

/// Reads what arrived, answers every complete frame, writes the answers in
/// one batch: what routerd's gateway does per connection, minus routing.
async fn serve(mut stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let mut decoder = FrameDecoder::new(Peer::Client, DEFAULT_MAX_BODY);
    let mut out = Vec::with_capacity(OUT_FLUSH_BYTES);
    loop {
        let n = match stream.read(decoder.read_buf()).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        decoder.advance(n);
        loop {
            match decoder.next_frame() {
                Ok(Some(frame)) => {
                    let h = frame.header;
                    encode_frame(&mut out, FrameKind::Response, h.route_id, h.seq, frame.body);
                    if out.len() >= OUT_FLUSH_BYTES {
                        if stream.write_all(&out).await.is_err() {
                            return;
                        }
                        out.clear();
                    }
                }
                Ok(None) => break,
                // A protocol violation closes the connection, as in routerd.
                Err(_) => return,
            }
        }
        if !out.is_empty() {
            if stream.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
    }
}
