//! Little-endian byte helpers for object states and bodies: explicit,
//! bounded, and never panicking on bytes read back from the store, a peer
//! or a client. Every read returns `None` when the bytes run out, so a
//! decoder is a chain of `?` that ends in [`Reader::is_empty`].

use super::ClientRef;
use crate::ids::NodeId;

/// Reads fields off the front of a byte slice.
pub struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes }
    }

    /// The next byte, or `None` past the end.
    pub fn u8(&mut self) -> Option<u8> {
        let (first, rest) = self.bytes.split_first()?;
        self.bytes = rest;
        Some(*first)
    }

    /// The next little-endian `u16`, or `None` past the end.
    pub fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.array()?))
    }

    /// The next little-endian `u32`, or `None` past the end.
    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.array()?))
    }

    /// The next little-endian `u64`, or `None` past the end.
    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.array()?))
    }

    /// The next little-endian `i64`, or `None` past the end.
    pub fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.array()?))
    }

    /// `len` bytes.
    pub fn bytes(&mut self, len: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.bytes.split_at_checked(len)?;
        self.bytes = rest;
        Some(head)
    }

    /// A `u32` length, then that many bytes of UTF-8, at most `max_len`.
    pub fn str(&mut self, max_len: usize) -> Option<&'a str> {
        let len = self.u32()? as usize;
        if len > max_len {
            return None;
        }
        std::str::from_utf8(self.bytes(len)?).ok()
    }

    /// An optional session, as [`put_client`] wrote it.
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

    /// What is left.
    pub fn rest(&self) -> &'a [u8] {
        self.bytes
    }

    /// Whether nothing was written yet.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.bytes.split_first_chunk::<N>()?;
        self.bytes = rest;
        Some(*head)
    }
}

/// The most bytes [`put_client`] writes.
pub const CLIENT_LEN_MAX: usize = 1 + 4 * 8;

/// Appends an optional session: `0`, or `1` and its four fields (33 bytes).
pub fn put_client(out: &mut Vec<u8>, client: Option<ClientRef>) {
    // `CLIENT_LEN_MAX` bytes at most: the flag and four `u64`s.
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

/// Appends a `u32` length and the UTF-8 bytes of `text`.
pub fn put_str(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_short_input_is_none() {
        let client = ClientRef {
            gateway_node: NodeId(3),
            session_id: 4,
            session_epoch: 5,
            player_id: 6,
        };
        let mut bytes = vec![7];
        bytes.extend_from_slice(&9u16.to_le_bytes());
        put_client(&mut bytes, Some(client));
        put_client(&mut bytes, None);
        put_str(&mut bytes, "héllo");
        bytes.extend_from_slice(&(-2i64).to_le_bytes());
        let mut reader = Reader::new(&bytes);
        assert_eq!(reader.u8(), Some(7));
        assert_eq!(reader.u16(), Some(9));
        assert_eq!(reader.client(), Some(Some(client)));
        assert_eq!(reader.client(), Some(None));
        assert_eq!(reader.str(64), Some("héllo"));
        assert_eq!(reader.i64(), Some(-2));
        assert!(reader.is_empty());
        assert_eq!(reader.u8(), None);
        // A length past the bound, or past the bytes, is refused.
        let mut long = Vec::new();
        put_str(&mut long, "abcdef");
        assert_eq!(Reader::new(&long).str(5), None);
        assert_eq!(Reader::new(&long[..8]).str(64), None);
        assert_eq!(Reader::new(&[2]).client(), None);
    }
}
