//! Little-endian state codecs shared by the services: explicit, bounded, and
//! never panicking on bytes read back from the store or a peer.

use crate::router::ClientRef;
use crate::store::NodeId;

pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes }
    }

    pub fn u8(&mut self) -> Option<u8> {
        let (first, rest) = self.bytes.split_first()?;
        self.bytes = rest;
        Some(*first)
    }

    pub fn u64(&mut self) -> Option<u64> {
        let (head, rest) = self.bytes.split_at_checked(8)?;
        self.bytes = rest;
        Some(u64::from_le_bytes(head.try_into().ok()?))
    }

    pub fn u32(&mut self) -> Option<u32> {
        let (head, rest) = self.bytes.split_at_checked(4)?;
        self.bytes = rest;
        Some(u32::from_le_bytes(head.try_into().ok()?))
    }

    pub fn client(&mut self) -> Option<Option<ClientRef>> {
        match self.u8()? {
            0 => Some(None),
            1 => Some(Some(ClientRef {
                gateway_node: NodeId(self.u64()?),
                session_id: self.u64()?,
                // Stored as 8 bytes (the format predates u32 epochs); a
                // value past u32 is not an epoch a gateway gave.
                session_epoch: u32::try_from(self.u64()?).ok()?,
                player_id: self.u64()?,
            })),
            _ => None,
        }
    }

    pub fn rest(&self) -> &'a [u8] {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

pub(crate) fn put_client(out: &mut Vec<u8>, client: Option<ClientRef>) {
    match client {
        None => out.push(0),
        Some(client) => {
            out.push(1);
            out.extend_from_slice(&client.gateway_node.0.to_le_bytes());
            out.extend_from_slice(&client.session_id.to_le_bytes());
            out.extend_from_slice(&u64::from(client.session_epoch).to_le_bytes());
            out.extend_from_slice(&client.player_id.to_le_bytes());
        }
    }
}
