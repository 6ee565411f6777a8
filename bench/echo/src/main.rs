//! `echo --listen ADDR --cpus 0[,1...] [--runtime shards|glommio]`: one
//! pinned executor per CPU, each accepting on ADDR (SO_REUSEPORT) and
//! echoing client-protocol frames (docs/protocol.md).
//!
//! On `shards` (the default) it is the ceiling any server on routerd's
//! stack can reach: the same framing, codec and runtime (rings set up as
//! routerd's cores set them up) as routerd's gateway, and no routing,
//! sessions or objects. `bench/ping_vs_echo.sh` compares routerd's `ping`
//! against it. On `glommio` it is the same server on glommio 0.9, whose
//! rings cannot be given those flags: `bench/runtime_vs_glommio.sh` keeps
//! the measurement that moved routerd off it.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

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
    let (listen, cpus, runtime) = match parse_args() {
        Ok(parsed) => parsed,
        Err(message) => {
            eprintln!(
                "echo: {message}\nusage: echo [--listen 127.0.0.1:7500] [--cpus 0,1] \
                 [--runtime shards|glommio] [--taskrun defer|coop] [--spin-us N]"
            );
            return ExitCode::from(2);
        }
    };
    match runtime {
        Runtime::Shards { spin, taskrun } => serve_on_shards(listen, cpus, spin, taskrun),
        Runtime::Glommio => serve_on_glommio(listen, cpus),
    }
}

enum Runtime {
    Shards {
        spin: Duration,
        taskrun: shards::TaskRun,
    },
    Glommio,
}

fn serve_on_shards(
    listen: SocketAddr,
    cpus: Vec<usize>,
    spin: Duration,
    taskrun: shards::TaskRun,
) -> ExitCode {
    let mut config = shards::RuntimeConfig::new(shards::CorePlacement::Cpus(cpus));
    config.spin_before_park = spin;
    config.ring_taskrun = taskrun;
    config.thread_name_prefix = "echo".to_string();
    // A benchmark restarts the echo on the same port at once: the last
    // run's listener must be gone before this one's cores join its group.
    if let Err(error) = shards::net::wait_until_free(listen, Duration::from_secs(2)) {
        eprintln!("echo: cannot listen on {listen}: {error}");
        return ExitCode::FAILURE;
    }
    let shutdown = shards::ShutdownHandle::new();
    let runtime = shards::Runtime::start::<(), _, _>(&config, shutdown, move |core| async move {
        let listener = match shards::net::TcpListener::bind(listen) {
            Ok(listener) => listener,
            Err(error) => {
                eprintln!("echo: cannot bind {listen}: {error}");
                return;
            }
        };
        core.ready();
        loop {
            match listener.accept().await {
                Ok(stream) => shards::spawn(serve_shards(stream)).detach(),
                Err(error) => eprintln!("echo: accept: {error}"),
            }
        }
    });
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("echo: {error}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!(
        "echo: listening on {listen} (shards, {})",
        runtime.ring_taskrun().name()
    );
    let _ = runtime.join();
    ExitCode::SUCCESS
}

/// What `serve` does, on routerd's runtime: every frame of a receive is
/// answered, the answers leave in one send.
async fn serve_shards(stream: shards::net::TcpStream) {
    let _ = stream.set_nodelay(true);
    let mut decoder = FrameDecoder::new(Peer::Client, DEFAULT_MAX_BODY);
    let mut out = Vec::with_capacity(OUT_FLUSH_BYTES);
    while let Ok(Some(received)) = stream.recv().await {
        let mut rest: &[u8] = &received;
        while !rest.is_empty() {
            let taken = decoder.extend(rest);
            rest = &rest[taken..];
            loop {
                match decoder.next_frame() {
                    Ok(Some(frame)) => {
                        let h = frame.header;
                        encode_frame(&mut out, FrameKind::Response, h.route_id, h.seq, frame.body);
                    }
                    Ok(None) => break,
                    Err(_) => return,
                }
            }
        }
        drop(received);
        if !out.is_empty() {
            let (sent, back) = stream.send_all(std::mem::take(&mut out)).await;
            if sent.is_err() {
                return;
            }
            out = back;
            out.clear();
        }
    }
}

fn serve_on_glommio(listen: SocketAddr, cpus: Vec<usize>) -> ExitCode {
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
    eprintln!("echo: listening on {listen} (glommio)");
    for handle in handles {
        let _ = handle.join();
    }
    ExitCode::SUCCESS
}

fn parse_args() -> Result<(SocketAddr, Vec<usize>, Runtime), String> {
    let mut listen: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 7500));
    let mut cpus = vec![0];
    let mut glommio = false;
    let mut spin = Duration::ZERO;
    let mut taskrun = shards::TaskRun::Defer;
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
            "--runtime" => match value.as_str() {
                "shards" => glommio = false,
                "glommio" => glommio = true,
                other => return Err(format!("--runtime: unknown runtime {other}")),
            },
            "--taskrun" => {
                taskrun = match value.as_str() {
                    "defer" => shards::TaskRun::Defer,
                    "coop" => shards::TaskRun::Coop,
                    other => return Err(format!("--taskrun: unknown mode {other}")),
                }
            }
            "--spin-us" => {
                let us: u64 = value.parse().map_err(|e| format!("--spin-us: {e}"))?;
                spin = Duration::from_micros(us);
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    let runtime = if glommio {
        Runtime::Glommio
    } else {
        Runtime::Shards { spin, taskrun }
    };
    Ok((listen, cpus, runtime))
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
