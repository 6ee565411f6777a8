//! A link connection's bytes: the handshake on both sides, each message
//! read under one deadline, and what follows it handed to the frame
//! decoder. Shared by the dialling side (`links`) and the accepting side
//! (`accept`).

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use shards::net::TcpStream;

use super::codec::{LinkDecoder, Sealer};
use super::handshake::{self, Challenge, Hello, LinkKeys, Refusal, LINK_VERSION, MESSAGE_LEN_MAX};
use crate::ids::NodeId;

/// `future`, or `None` once `deadline` passed.
pub async fn before<T>(deadline: Instant, future: impl Future<Output = T>) -> Option<T> {
    futures_lite::future::or(async { Some(future.await) }, async {
        shards::sleep_until(deadline).await;
        None
    })
    .await
}

/// Bytes one send of a large batch carries at most: a send completes
/// only once all its bytes are in the socket, and each must complete
/// within the silence a peer is allowed.
const SEND_CHUNK_MAX: usize = 256 << 10;

/// Sends all of `buf`, giving up (`None`) only when `silence` passes with
/// no piece of it taken: a peer that reads a large batch slowly but
/// steadily is not taken for a silent one (a deadline on the whole batch
/// closed a healthy link whose batch took longer than `silence` to cross).
/// The buffer comes back, for the next batch.
pub async fn send_all_progressing(
    stream: &TcpStream,
    buf: Vec<u8>,
    silence: Duration,
) -> Option<(io::Result<()>, Vec<u8>)> {
    if buf.len() <= SEND_CHUNK_MAX {
        return before(Instant::now() + silence, stream.send_all(buf)).await;
    }
    for start in (0..buf.len()).step_by(SEND_CHUNK_MAX) {
        let piece = buf[start..buf.len().min(start + SEND_CHUNK_MAX)].to_vec();
        if let (Err(error), _) = before(Instant::now() + silence, stream.send_all(piece)).await? {
            return Some((Err(error), buf));
        }
    }
    Some((Ok(()), buf))
}

/// A connection during its handshake.
pub struct Conn {
    pub stream: Rc<TcpStream>,
    /// Bytes received past the last handshake message.
    pending: Vec<u8>,
    deadline: Instant,
    /// The acceptor read the dialler's whole Hello (shared with the
    /// listener, which evicts connections that have not first).
    pub hello_read: Rc<Cell<bool>>,
}

/// Who this side is, for a handshake.
pub struct LocalEnd<'a> {
    pub cluster: &'a str,
    pub secret: &'a [u8],
    pub node: NodeId,
    pub incarnation: u64,
    pub core: usize,
}

/// The peer a dialler reached.
pub struct Accepted {
    pub incarnation: u64,
    pub keys: LinkKeys,
}

/// What an acceptor knows of a dialler that proved itself.
pub struct Dialler {
    pub node: NodeId,
    pub incarnation: u64,
    pub core: usize,
    pub keys: LinkKeys,
}

/// Which end of a link this side is: it seals with one direction's key
/// and opens with the other's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    Dialler,
    Acceptor,
}

impl Conn {
    pub fn new(stream: TcpStream, deadline: Instant) -> Conn {
        Conn {
            stream: Rc::new(stream),
            pending: Vec::new(),
            deadline,
            hello_read: Rc::default(),
        }
    }

    /// The record sealer of this side and the decoder of the other's,
    /// with whatever came after the handshake.
    pub fn into_link(self, keys: &LinkKeys, end: End) -> (Rc<TcpStream>, Sealer, LinkDecoder) {
        let (send, receive) = match end {
            End::Dialler => (&keys.dialler_to_acceptor, &keys.acceptor_to_dialler),
            End::Acceptor => (&keys.acceptor_to_dialler, &keys.dialler_to_acceptor),
        };
        let mut decoder = LinkDecoder::new(receive);
        decoder.extend(&self.pending);
        (self.stream, Sealer::new(send), decoder)
    }

    async fn send(&self, bytes: Vec<u8>) -> Result<(), Refusal> {
        let sent = before(self.deadline, self.stream.send_all(bytes)).await;
        match sent {
            Some((Ok(()), _)) => Ok(()),
            Some((Err(_), _)) => Err(Refusal::Malformed),
            None => Err(Refusal::Timeout),
        }
    }

    /// The next handshake message, whole.
    async fn read(&mut self) -> Result<Vec<u8>, Refusal> {
        self.read_by(self.deadline).await
    }

    /// The next handshake message, whole, by `deadline`.
    async fn read_by(&mut self, deadline: Instant) -> Result<Vec<u8>, Refusal> {
        loop {
            if let Some(len) = handshake::message_len(&self.pending)? {
                if len > MESSAGE_LEN_MAX {
                    return Err(Refusal::Malformed);
                }
                if self.pending.len() >= len {
                    let rest = self.pending.split_off(len);
                    return Ok(std::mem::replace(&mut self.pending, rest));
                }
            }
            if self.pending.len() > MESSAGE_LEN_MAX {
                return Err(Refusal::Malformed);
            }
            match before(deadline, self.stream.recv()).await {
                None => return Err(Refusal::Timeout),
                Some(Ok(Some(bytes))) => self.pending.extend_from_slice(&bytes),
                // Closed or failed mid-handshake: the peer went away.
                Some(Ok(None) | Err(_)) => return Err(Refusal::Malformed),
            }
        }
    }

    /// The dialler's side: Hello, check the Challenge, Proof, Verdict.
    /// `expected` is the peer's incarnation as membership knows it (or as
    /// it proved by linking in); an older one answering is a stale
    /// process, a newer one a restart this node has not read yet, whose
    /// cores this node may have counted wrong: refused either way, and the
    /// messages queued for it go back to the router, which re-resolves
    /// them once the view holds the new row.
    pub async fn dial(
        &mut self,
        local: &LocalEnd<'_>,
        to: (NodeId, usize),
        expected: u64,
    ) -> Result<Accepted, Refusal> {
        let hello = Hello {
            version: LINK_VERSION,
            cluster: local.cluster.to_string(),
            from_node: local.node.0,
            from_incarnation: local.incarnation,
            from_core: local.core as u16,
            to_node: to.0 .0,
            to_core: to.1 as u16,
            nonce: handshake::nonce(),
        }
        .encode();
        self.send(hello.clone()).await?;
        let challenge_bytes = self.read().await?;
        let challenge = Challenge::decode(&challenge_bytes)?;
        let incarnation = match challenge {
            Challenge::Refused(reason) => return Err(reason),
            Challenge::Proceed { incarnation, .. } => incarnation,
        };
        if !challenge.verify(local.secret, &hello) {
            return Err(Refusal::BadSecret);
        }
        if incarnation != expected {
            return Err(Refusal::StaleIncarnation);
        }
        self.send(handshake::proof(local.secret, &hello, &challenge_bytes))
            .await?;
        handshake::decode_verdict(&self.read().await?)?;
        Ok(Accepted {
            incarnation,
            keys: LinkKeys::derive(local.secret, &hello, &challenge_bytes),
        })
    }

    /// The acceptor's side. The Hello must arrive by `hello_by` (a
    /// dialler sends it as soon as it connected), the rest by the
    /// connection's deadline. `admit` judges the dialler's node and
    /// incarnation (membership may not know it, or know it ended); a node
    /// that is not a member, or not at that incarnation, is refused only
    /// once it proved the secret. A refusal is sent to the peer before it
    /// is returned.
    pub async fn accept(
        &mut self,
        local: &LocalEnd<'_>,
        hello_by: Instant,
        admit: impl Fn(NodeId, u64) -> Result<(), Refusal>,
    ) -> Result<Dialler, Refusal> {
        let hello_bytes = self.read_by(hello_by.min(self.deadline)).await?;
        self.hello_read.set(true);
        let hello = Hello::decode(&hello_bytes)?;
        let checked = if hello.version != LINK_VERSION {
            Err(Refusal::Version)
        } else if hello.cluster != local.cluster {
            Err(Refusal::ClusterName)
        } else if hello.to_node != local.node.0
            || usize::from(hello.to_core) != local.core
            || hello.from_node == local.node.0
        {
            Err(Refusal::WrongNode)
        } else {
            admit(NodeId(hello.from_node), hello.from_incarnation)
        };
        // Who is a member, and at which incarnation, is told only to a
        // peer that proved the secret: those refusals wait for the Proof
        // (refused at once, a Hello naming a member at rising
        // incarnations would read its incarnation off the answers).
        let (checked, membership) = match checked {
            Err(refusal @ (Refusal::NotMember | Refusal::StaleIncarnation)) => {
                (Ok(()), Some(refusal))
            }
            other => (other, None),
        };
        if let Err(reason) = checked {
            let _ = self.send(Challenge::Refused(reason).encode()).await;
            return Err(reason);
        }
        let challenge = Challenge::new(
            local.secret,
            &hello_bytes,
            local.incarnation,
            handshake::nonce(),
        )
        .encode();
        self.send(challenge.clone()).await?;
        let proof = self.read().await?;
        if !handshake::check_proof(local.secret, &hello_bytes, &challenge, &proof) {
            let _ = self.send(handshake::verdict(Err(Refusal::BadSecret))).await;
            return Err(Refusal::BadSecret);
        }
        if let Some(refusal) = membership {
            let _ = self.send(handshake::verdict(Err(refusal))).await;
            return Err(refusal);
        }
        self.send(handshake::verdict(Ok(()))).await?;
        Ok(Dialler {
            node: NodeId(hello.from_node),
            incarnation: hello.from_incarnation,
            core: usize::from(hello.from_core),
            keys: LinkKeys::derive(local.secret, &hello_bytes, &challenge),
        })
    }
}
