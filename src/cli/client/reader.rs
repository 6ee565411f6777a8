//! The reader thread: decodes the server's frames, prints each push and
//! answer as one line, and tells the main thread of answers and the end.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use wire::client::{route, FrameDecoder, FrameKind, FrameRef, Peer};
use wire::layers::ClientLayers;

use super::command::Sent;
use super::{lock, render, Closed, Event, Pending, SERVER_BODY_MAX};

pub(super) fn read_loop(
    stream: TcpStream,
    layers: Option<Arc<Mutex<ClientLayers>>>,
    pending: &Pending,
    events: &Sender<Event>,
) {
    let mut source = Source {
        stream,
        layers,
        opened: Vec::new(),
    };
    let closed = read_frames(&mut source, pending, events);
    let _ = events.send(Event::Closed(closed));
}

/// The read side: bytes from the socket, opened by the layers if any.
struct Source {
    stream: TcpStream,
    layers: Option<Arc<Mutex<ClientLayers>>>,
    /// Protocol bytes opened but not yet taken by the decoder.
    opened: Vec<u8>,
}

impl Read for Source {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(layers) = &self.layers else {
            return self.stream.read(buf);
        };
        while self.opened.is_empty() {
            let mut wire = [0u8; 16 * 1024];
            let n = self.stream.read(&mut wire)?;
            if n == 0 {
                return Ok(0);
            }
            let mut layers = layers
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            layers
                .open(&wire[..n], &mut self.opened)
                .map_err(io::Error::other)?;
            // The handshake's next flight, a pong: sent under the lock.
            if layers.wants_write() {
                let mut owed = Vec::new();
                layers.seal(&[], &mut owed);
                (&self.stream).write_all(&owed)?;
            }
        }
        let n = buf.len().min(self.opened.len());
        buf[..n].copy_from_slice(&self.opened[..n]);
        self.opened.drain(..n);
        Ok(n)
    }
}

/// Decodes, prints and reports server frames until the connection ends.
fn read_frames(stream: &mut Source, pending: &Pending, events: &Sender<Event>) -> Closed {
    let mut decoder = FrameDecoder::new(Peer::Server, SERVER_BODY_MAX);
    let mut kicked = false;
    loop {
        loop {
            let frame = match decoder.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(error) => return Closed::Protocol(error.to_string()),
            };
            kicked |=
                frame.header.kind == FrameKind::Push && frame.header.route_id == route::SYS_KICKED;
            if let Err(closed) = on_frame(&frame, pending, events) {
                return closed;
            }
        }
        match stream.read(decoder.read_buf()) {
            Ok(0) if kicked => return Closed::Kicked,
            Ok(0) => return Closed::ByServer,
            Ok(n) => decoder.advance(n),
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            // A kicked session may be reset rather than closed.
            Err(_) if kicked => return Closed::Kicked,
            Err(error) => return Closed::Io(error),
        }
    }
}

/// Prints one frame; an answer also wakes the main thread.
fn on_frame(frame: &FrameRef<'_>, pending: &Pending, events: &Sender<Event>) -> Result<(), Closed> {
    let header = frame.header;
    if header.kind == FrameKind::Push {
        let line = render::push(header.route_id, frame.body)
            .map_err(|malformed| Closed::Protocol(malformed.0))?;
        return print(&line);
    }
    let in_flight = {
        let mut pending = lock(pending);
        match pending.take() {
            Some(in_flight) if in_flight.seq == header.seq => in_flight,
            other => {
                *pending = other;
                return Err(Closed::Protocol(format!(
                    "an answer to seq {}, which is not in flight",
                    header.seq
                )));
            }
        }
    };
    let ok = header.kind == FrameKind::Response;
    if in_flight.sent == Sent::Keepalive {
        // Silent unless it failed: a script's output is its own commands.
        if !ok {
            let line = render::error(frame.body).map_err(|m| Closed::Protocol(m.0))?;
            eprintln!("routerd client: keepalive ping answered {line}");
        }
    } else {
        let line = render::answer(frame, &in_flight.sent)
            .map_err(|malformed| Closed::Protocol(malformed.0))?;
        print(&line)?;
    }
    let _ = events.send(Event::Answered {
        seq: header.seq,
        ok,
    });
    Ok(())
}

fn print(line: &str) -> Result<(), Closed> {
    // Stdout is line buffered, so each line reaches a pipe whole and at once.
    writeln!(io::stdout().lock(), "{line}").map_err(Closed::Stdout)
}
